"""Memory probes: CUDA allocator counters on the GPU, resident set size (RSS) on the CPU."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

log = logging.getLogger(__name__)
MIB = 1 << 20
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


class MemoryProbe:
    """``resident()`` now, and the peak above the start of a region (``start_peak`` / ``peak_mib``)."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"
        self._base = 0
        self._can_reset_rss = False
        if not self.cuda:
            try:
                _CLEAR_REFS.write_text("5")  # resets VmHWM (peak RSS) to the current RSS
                self._can_reset_rss = True
            except OSError:
                log.warning("cannot reset the peak RSS (%s): CPU peak memory is left out", _CLEAR_REFS)

    def resident(self) -> int:
        """Bytes held now: allocated by the CUDA caching allocator, or the process's RSS."""
        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.memory_allocated()
        return _status_kib("VmRSS") * 1024

    def start_peak(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            self._base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        elif self._can_reset_rss:
            _CLEAR_REFS.write_text("5")
            self._base = _status_kib("VmRSS") * 1024

    def peak_mib(self) -> float | None:
        """The peak since ``start_peak`` above what was held then: the call's working memory."""
        if self.cuda:
            torch.cuda.synchronize()
            return (torch.cuda.max_memory_allocated() - self._base) / MIB
        if not self._can_reset_rss:
            return None
        return max(0, _status_kib("VmHWM") * 1024 - self._base) / MIB
