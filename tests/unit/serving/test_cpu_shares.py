"""Replicas of a CPU repository on one host each get their own share of the CPUs."""

from __future__ import annotations

import pytest

from serving.launcher.replicas import cpu_shares


@pytest.mark.parametrize(
    ("n", "cpus", "shares"),
    [
        (2, [0, 1], [[0], [1]]),
        (3, list(range(8)), [[0, 1, 2], [3, 4, 5], [6, 7]]),
        (3, [0, 1], [[0], [1], [0]]),  # more replicas than CPUs: they share in turn
        (1, [2, 5], [[2, 5]]),  # an affinity of the launcher's own is kept
    ],
)
def test_replicas_on_the_cpu_split_the_usable_cpus(n, cpus, shares):
    assert cpu_shares(n, cpus) == shares
