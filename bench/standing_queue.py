"""The standing-queue rule (backend/src/work_queue.h) at fixed open-loop rates, settings interleaved rate by rate on
this machine: `embed`, one text a request with no timeout of its own (the model's default deadline).

    python -m bench.standing_queue --repository build/test-repository --rates 350,500,1500 --targets-us 0,40000 \
        --seconds 40 --server-cpus 1

Per rate and `standing_queue_us` (0: the deadline alone), a fresh server; reports requests served per second, the
share refused and the accepted p50/p99; writes reports/standing-queue.json. With `--server-cpus` the server runs on
those CPUs and the load on the others (reliability/README.md says why).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import platform
import tempfile
from pathlib import Path

from reliability import processes, traffic
from reliability.copies import linked_copy, set_native_parameter

log = logging.getLogger(__name__)


async def at_rate(url: str, rate: float, seconds: float) -> dict:
    await traffic.open_loop(url, 20.0, 1.0)  # uncounted warm-up
    run = await traffic.open_loop(url, rate, seconds, deadline_s=5.0, seed=3)
    s = run.summary()
    return {
        "served_per_s": s["throughput_ok_per_s"],
        "refused_pct": round(100 * s["failed"] / max(s["sent"], 1), 1),
        "p50_ms": s["p50_ms"],
        "p99_ms": s["p99_ms"],
        "sent": s["sent"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repository", type=Path, default=Path("model_repository"))
    p.add_argument("--rates", default="350,500,1500", help="requests per second, comma-separated")
    p.add_argument("--targets-us", default="0,40000", help="standing_queue_us settings, comma-separated")
    p.add_argument("--seconds", type=float, default=40.0)
    p.add_argument("--server-cpus", type=processes.parse_cpus, default=None)
    p.add_argument("--output", type=Path, default=Path("reports/standing-queue.json"))
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    processes.load_beside(args.server_cpus)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repos = {}
        for target in args.targets_us.split(","):
            repos[target] = linked_copy(args.repository.resolve(), Path(tmp) / target)
            set_native_parameter(repos[target], "standing_queue_us", target)
        for rate in (float(r) for r in args.rates.split(",")):
            for target, repo in repos.items():
                with processes.running(repo, Path(tmp) / f"{target}.log", cpus=args.server_cpus) as server:
                    row = {
                        "rate": rate,
                        "standing_queue_us": int(target),
                        **asyncio.run(at_rate(server.grpc_url, rate, args.seconds)),
                    }
                log.info("%s", json.dumps(row))
                rows.append(row)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"cpu": platform.processor() or platform.machine(), "results": rows}, indent=2))


if __name__ == "__main__":
    main()
