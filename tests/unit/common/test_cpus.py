from __future__ import annotations

import os

import pytest

from common import cpus


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"cpu.max": "max 100000\n"}, 0),
        ({"cpu.max": "150000 100000\n"}, 2),  # 1.5 CPUs of quota: two threads, as the backend counts
        ({"cpu.max": "200000 100000\n"}, 2),
        ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3),  # cgroup v1
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, 0),
        ({"cpu.max": "garbled\n"}, 0),
        ({}, 0),
    ],
)
def test_cgroup_cpus_reads_the_quota_in_whole_cpus(tmp_path, files, expected):
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert cpus.cgroup_cpus(tmp_path) == expected


def test_usable_cpus_is_the_affinity_capped_by_the_quota(monkeypatch):
    affinity = len(os.sched_getaffinity(0))
    monkeypatch.setattr(cpus, "cgroup_cpus", lambda: 0)
    assert cpus.usable_cpus() == affinity
    monkeypatch.setattr(cpus, "cgroup_cpus", lambda: 1)
    assert cpus.usable_cpus() == 1
    monkeypatch.setattr(cpus, "cgroup_cpus", lambda: affinity + 5)
    assert cpus.usable_cpus() == affinity
