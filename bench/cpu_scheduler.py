"""Two builds of the native backend on the same repository, interleaved round by round on this machine: one short
text per request at concurrency 1 over gRPC (latency, and the server's CPU seconds per request), then a burst of
concurrent bulk requests with long client timeouts (how many are served).

    python -m bench.cpu_scheduler --baseline /path/to/libtriton_bertserve.so --rounds 3

Writes reports/cpu-scheduler.json. CPU time is tritonserver's own (user + system, from /proc), over the timed
window, divided by the requests answered in it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from loadtest.config import LoadTestConfig
from loadtest.payload import build_pool
from reliability import processes
from serving.launcher import native

TICK = os.sysconf("SC_CLK_TCK")


log = logging.getLogger(__name__)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def texts_input(texts: list[str], client) -> list:
    data = np.array([[t.encode()] for t in texts], dtype=np.object_)
    i = client.InferInput("TEXT", list(data.shape), "BYTES")
    i.set_data_from_numpy(data)
    return [i]


def sequential(url: str, texts: list[str], seconds: float, pid: int) -> dict:
    client = grpcclient.InferenceServerClient(url)
    for t in texts[:20]:
        client.infer("embed", texts_input([t], grpcclient))
    latencies, cpu0, start = [], cpu_seconds(pid), time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        client.infer("embed", texts_input([texts[len(latencies) % len(texts)]], grpcclient))
        latencies.append(time.perf_counter() - t0)
    wall, cpu = time.perf_counter() - start, cpu_seconds(pid) - cpu0
    ms = np.array(latencies) * 1e3
    return {
        "requests": len(ms), "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3), "server_cpu_ms_per_request": round(cpu / len(ms) * 1e3, 3),
        "cpu_over_latency": round(cpu / len(ms) / float(np.mean(ms) / 1e3), 3), "wall_s": round(wall, 2),
    }  # fmt: skip


async def burst(url: str, texts: list[str], requests: int, per_request: int, timeout_s: float) -> dict:
    client = grpcaio.InferenceServerClient(url)

    async def one(k: int) -> str:
        chosen = [texts[(k * per_request + j) % len(texts)] for j in range(per_request)]
        try:
            await client.infer("embed", texts_input(chosen, grpcaio), client_timeout=timeout_s,
                               timeout=int(timeout_s * 1e6))  # fmt: skip
            return "ok"
        except InferenceServerException as e:
            return f"{e.status()}: {e.message()}"

    start = time.perf_counter()
    try:
        out = await asyncio.gather(*[one(k) for k in range(requests)])
    finally:
        await client.close()
    failed = [o for o in out if o != "ok"]
    return {"served": len(out) - len(failed), "of": len(out), "seconds": round(time.perf_counter() - start, 2),
            "first_failure": failed[0] if failed else None}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repository", type=Path, default=Path("model_repository"))
    p.add_argument("--baseline", type=Path, required=True, help="the other build's libtriton_bertserve.so")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--output", type=Path, default=Path("reports/cpu-scheduler.json"))
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    texts = [x.text for x in build_pool(LoadTestConfig(payload="fixed", token_length=16), "text")]
    builds = {"baseline": args.baseline.resolve(), "this": native.LIBRARY.resolve()}
    results: dict[str, list] = {name: [] for name in builds}
    for r in range(args.rounds):
        for name, library in builds.items():
            log_path = Path(f"/tmp/cpu-scheduler-{name}.log")
            server = processes.start(
                args.repository.resolve(), log_path, env={"BERTSERVE_BACKEND_LIBRARY": str(library)}
            )
            try:
                server.wait_ready(120)
                pid = server.tritonserver_pid()
                row = {"round": r, "c1": sequential(server.grpc_url, texts, args.seconds, pid),
                       "burst": asyncio.run(burst(server.grpc_url, texts, 24, 16, 60.0))}  # fmt: skip
            finally:
                processes.stop(server)
            log.info("%s %s", name, json.dumps(row))
            results[name].append(row)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps({"cpu": platform.processor() or platform.machine(), "results": results}, indent=2)
    )


if __name__ == "__main__":
    main()
