"""The Python-backend stub processes under a tritonserver: which model each serves and its shared-memory region,
and the regions a killed server leaves in /dev/shm. The launcher's stub watchdog and drain use them, and so do the
harnesses that run the server as processes (reliability/processes.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path

STUB = "triton_python_backend_stub"


def stubs(tritonserver_pid: int) -> list[tuple[str, str]]:
    """The live Python-backend stubs under tritonserver, one per instance: (model, the stub's shared-memory region);
    a stub's arguments are <model>/1/model.py, then the region's name."""
    out = []
    for task in Path(f"/proc/{tritonserver_pid}/task").glob("*/children"):
        for pid in task.read_text().split():
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if len(args) > 2 and Path(args[0]).name == STUB:
                out.append((Path(args[1]).parent.parent.name, args[2]))
    return out


def remove_regions(regions: set[str]) -> None:
    """A tritonserver that was killed leaves its stubs' shared-memory regions in /dev/shm; a clean exit removes them."""
    for name in regions:
        if name.startswith("triton_python_backend_shm_region_") and "/" not in name:
            with contextlib.suppress(OSError):
                (Path("/dev/shm") / name).unlink()
