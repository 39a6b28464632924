"""How many CPUs this process may use: its affinity, capped by the cgroup's CPU quota, as the native backend's
``UsableCpus`` (backend/src/settings.cc) counts them for a model whose ``threads`` is 0. The launcher counts them
so to judge a repository's thread counts before the server starts."""

from __future__ import annotations

import math
import os
from pathlib import Path


def cgroup_cpus(root: Path = Path("/sys/fs/cgroup")) -> int:
    """The cgroup's CPU quota rounded up to whole CPUs (v2 ``cpu.max``, else v1's CFS quota); 0 when unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return 0 if quota == "max" or float(period) <= 0 else math.ceil(float(quota) / float(period))
    except (OSError, ValueError):
        pass
    try:
        quota_us = float((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = float((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return 0
    return math.ceil(quota_us / period_us) if quota_us > 0 and period_us > 0 else 0


def usable_cpus() -> int:
    cpus = max(1, len(os.sched_getaffinity(0)))
    quota = cgroup_cpus()
    return min(cpus, quota) if quota > 0 else cpus
