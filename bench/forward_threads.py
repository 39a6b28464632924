"""One CPU forward of an exported AOTInductor package with 1 and with N OpenMP threads, interleaved: the wall
time and the process's CPU time per forward, which is what the compute pool's team size trades.

    GOMP_SPINCOUNT=10000 python -m bench.forward_threads --artifact build/test-repository/bert/1/model.aoti.pt2

GOMP_SPINCOUNT as the server sets it. Writes reports/forward-threads.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import time
from pathlib import Path

import torch

from bench.stats import percentile
from serving.contract.hardware import cpu_model

log = logging.getLogger(__name__)

SHAPES = ((1, 16), (1, 32), (1, 64), (4, 16), (8, 16), (2, 64))


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(artifact: Path, threads: list[int], rounds: int, calls: int) -> dict[str, dict[str, float]]:
    model = torch._inductor.aoti_load_package(str(artifact))
    wall: dict[tuple, list[float]] = {}
    cpu: dict[tuple, float] = {}
    for _ in range(rounds):
        for batch, seq in SHAPES:
            ids = torch.randint(1000, 2000, (batch, seq))
            mask = torch.ones(batch, seq, dtype=torch.long)
            for n in threads:  # interleaved: each shape at every team size in every round
                torch.set_num_threads(n)
                model(ids, mask)
                c0 = cpu_s()
                for _ in range(calls):
                    t0 = time.perf_counter()
                    model(ids, mask)
                    wall.setdefault((batch, seq, n), []).append(time.perf_counter() - t0)
                cpu[(batch, seq, n)] = cpu.get((batch, seq, n), 0.0) + cpu_s() - c0
    out = {}
    for (batch, seq, n), samples in wall.items():
        out[f"{batch}x{seq} threads={n}"] = {
            "p50_ms": round(percentile(samples, 50) * 1e3, 3),
            "p99_ms": round(percentile(samples, 99) * 1e3, 3),
            "cpu_per_wall": round(cpu[(batch, seq, n)] / sum(samples), 2),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--artifact", type=Path, required=True, help="an AOTInductor package (model.aoti.pt2)")
    p.add_argument("--threads", default="1,2", help="comma-separated OpenMP team sizes")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--calls", type=int, default=10, help="forwards per shape and team size in a round")
    p.add_argument("--output", type=Path, default=Path("reports/forward-threads.json"))
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    figures = run(a.artifact, [int(n) for n in a.threads.split(",")], a.rounds, a.calls)
    for cell, row in figures.items():
        log.info("%s: %s", cell, row)
    report = {"cpu": cpu_model(), "cpus": os.cpu_count(), "artifact": str(a.artifact), "forwards": figures}
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
