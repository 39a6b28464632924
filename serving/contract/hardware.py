"""The processor a package was compiled or tuned for, named the same way at export and at serve time."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> frozenset[str]:
    """The instruction-set flags /proc/cpuinfo lists for the first CPU (``avx2``, ``avx512f``, ...); none elsewhere."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def processor(target: str) -> str:
    """The CPU model for a CPU target, the first GPU's name for a CUDA one."""
    if target == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    return cpu_model()
