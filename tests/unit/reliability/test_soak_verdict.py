"""The soak's pass conditions, on made-up summaries."""

from __future__ import annotations

import pytest

from reliability.__main__ import verdict

CLEAN = {"errors": 0, "p99_drift": 0.05, "rss_growth_after_warmup": 0.01, "fd_growth_after_warmup": 0}


def test_a_clean_soak_passes_every_condition():
    assert all(verdict(CLEAN).values())


@pytest.mark.parametrize(
    ("change", "failed"),
    [
        ({"errors": 1}, "zero_errors"),
        ({"p99_drift": 0.21}, "p99_stable"),
        ({"p99_drift": -0.3}, "p99_stable"),
        ({"rss_growth_after_warmup": 0.05}, "memory_flat"),
        ({"fd_growth_after_warmup": 3}, "fds_flat"),
    ],
)
def test_each_condition_fails_on_its_own(change, failed):
    v = verdict({**CLEAN, **change})
    assert [k for k, ok in v.items() if not ok] == [failed]
