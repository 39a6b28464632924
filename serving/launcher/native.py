"""The native encoder backend (backend/, C++ against the torch wheel's libtorch): where it is built and installed
(its name and runtimes are the repository's contract: serving/contract/native.py).

A model whose config says ``backend: "bertserve"`` runs inside the tritonserver process; tritonserver loads
``<backend-dir>/bertserve/libtriton_bertserve.so`` for it. ``make setup`` builds the library into build/backend/.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from serving.contract.native import NAME, RUNTIMES

__all__ = ["LIBRARY", "LIBRARY_NAME", "NAME", "RUNTIMES", "install"]

LIBRARY_NAME = f"libtriton_{NAME}.so"
# BERTSERVE_BACKEND_LIBRARY names another build (the sanitizer build of `make backend-asan`, say).
LIBRARY = Path(
    os.environ.get(
        "BERTSERVE_BACKEND_LIBRARY", Path(__file__).resolve().parents[2] / "build" / "backend" / LIBRARY_NAME
    )
)


def install(backend_dir: Path) -> bool:
    """Put the built library where tritonserver looks for the backend; False when it was not built."""
    if not LIBRARY.is_file():
        return False
    target = backend_dir / NAME / LIBRARY_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    src = LIBRARY.stat()
    if not target.exists() or target.stat().st_size != src.st_size or target.stat().st_mtime < src.st_mtime:
        # A name of its own: replicas started together install at once. The rename is atomic, and a running
        # server keeps the file it mapped.
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        try:
            shutil.copy2(LIBRARY, tmp)
            tmp.replace(target)
        finally:
            tmp.unlink(missing_ok=True)
    return True
