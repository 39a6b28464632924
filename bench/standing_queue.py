"""The standing-queue rule (backend/src/work_queue.h) at fixed open-loop rates and under closed loops, settings
interleaved load by load on this machine: `embed`, requests with no timeout of their own (the model's default
deadline).

    python -m bench.standing_queue --repository build/test-repository --rates 350,500,1500 --targets-us 0,40000 \
        --closed-loops 4x16,16x16,32x1 --seconds 40 --server-cpus 1

Per load and `standing_queue_us` (0: the deadline alone), a fresh server. A rate sends one text a request, open
loop; a closed loop `CxT` is C clients that each send T texts whenever answered (at capacity their waits stand
without any overload, and the rule must refuse none of them). Reports requests served per second, the share
refused (by the rule: its message), and the accepted p50/p99; writes reports/standing-queue.json. With
`--server-cpus` the server runs on those CPUs and the load on the others (reliability/README.md says why).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
from tritonclient.utils import InferenceServerException

from bench.cpu_scheduler import texts_input
from loadtest.config import LoadTestConfig
from loadtest.payload import build_pool
from reliability import processes, traffic
from reliability.copies import linked_copy, set_native_parameter

log = logging.getLogger(__name__)
BY_THE_RULE = "requests have waited over"  # the standing rule's refusals, apart from the deadline's


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


async def closed_loop(url: str, clients: int, texts_each: int, seconds: float) -> dict:
    """``clients`` clients, each sending ``texts_each`` corpus texts as soon as its last request was answered."""
    texts = [x.text for x in build_pool(LoadTestConfig(payload="corpus"), "text")]
    client = traffic.grpc_client(url)
    latencies: list[float] = []
    refusals: list[str] = []
    stop = time.perf_counter() + seconds

    async def one(k: int) -> None:
        while time.perf_counter() < stop:
            batch = [texts[(k * texts_each + j) % len(texts)] for j in range(texts_each)]
            start = time.perf_counter()
            try:
                await client.infer("embed", texts_input(batch, traffic.triton_grpc))
                latencies.append(time.perf_counter() - start)
            except InferenceServerException as e:
                refusals.append(e.message() or "")
            k += clients

    try:
        await asyncio.gather(*(one(k) for k in range(clients)))
    finally:
        await client.close()
    ms = np.array(latencies) * 1e3
    return {
        "served_per_s": round(len(latencies) / seconds, 1),
        "refused": len(refusals),
        "refused_by_the_rule": sum(BY_THE_RULE in r for r in refusals),
        "p50_ms": round(float(np.percentile(ms, 50)), 1) if latencies else None,
        "p99_ms": round(float(np.percentile(ms, 99)), 1) if latencies else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repository", type=Path, default=Path("model_repository"))
    p.add_argument("--rates", default="350,500,1500", help="requests per second, comma-separated")
    p.add_argument("--closed-loops", default="", help="CxT: C clients of T texts each, comma-separated")
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
        loads = [("rate", float(r)) for r in args.rates.split(",") if r]
        loads += [("closed_loop", c) for c in args.closed_loops.split(",") if c]
        for kind, load in loads:
            for target, repo in repos.items():
                with processes.running(repo, Path(tmp) / f"{target}.log", cpus=args.server_cpus) as server:
                    if kind == "rate":
                        figures = asyncio.run(at_rate(server.grpc_url, load, args.seconds))
                    else:
                        clients, texts_each = (int(n) for n in load.split("x"))
                        figures = asyncio.run(closed_loop(server.grpc_url, clients, texts_each, args.seconds))
                row = {kind: load, "standing_queue_us": int(target), **figures}
                log.info("%s", json.dumps(row))
                rows.append(row)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"cpu": platform.processor() or platform.machine(), "results": rows}, indent=2))


if __name__ == "__main__":
    main()
