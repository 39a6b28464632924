"""The native queue's two orders side by side, interleaved round by round on this machine: earliest deadline first
(the default) against first come, first served (`queue_order: arrival`), under a mix of bulk and interactive
clients on `embed` over gRPC.

    python -m bench.queue_order --repository build/test-repository --rounds 3 --seconds 20

Bulk clients send 16 texts a request with a 60 s timeout (their deadline), back to back; one interactive client
sends one text a request with no timeout (the model's default deadline). Reports the interactive client's p50/p99
and refusals and the bulk clients' texts per second, per order and round; writes reports/queue-order.json.
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
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from bench.cpu_scheduler import texts_input
from loadtest.config import LoadTestConfig
from loadtest.payload import build_pool
from reliability import processes
from reliability.copies import linked_copy, set_parameter

log = logging.getLogger(__name__)
ORDERS = ("deadline", "arrival")


async def mixed(url: str, texts: list[str], seconds: float, bulk_clients: int, bulk_texts: int) -> dict:
    client = grpcaio.InferenceServerClient(url)
    stop_at = time.perf_counter() + seconds
    interactive: list[float] = []
    refused: list[str] = []
    bulk_done = [0]

    async def bulk(k: int) -> None:
        i = k
        while time.perf_counter() < stop_at:
            chosen = [texts[(i * bulk_texts + j) % len(texts)] for j in range(bulk_texts)]
            await client.infer("embed", texts_input(chosen, grpcaio), client_timeout=60.0, timeout=60_000_000)
            bulk_done[0] += 1
            i += bulk_clients

    async def one_text() -> None:
        await asyncio.sleep(0.5)  # the bulk clients have filled the queue
        i = 0
        while time.perf_counter() < stop_at:
            start = time.perf_counter()
            try:
                await client.infer("embed", texts_input([texts[i % len(texts)]], grpcaio))
                interactive.append(time.perf_counter() - start)
            except InferenceServerException as e:
                refused.append(f"{e.status()}: {e.message()}")
            i += 1

    start = time.perf_counter()
    try:
        await asyncio.gather(one_text(), *[bulk(k) for k in range(bulk_clients)])
    finally:
        await client.close()
    wall = time.perf_counter() - start
    ms = np.array(interactive) * 1e3
    return {
        "interactive": {
            "served": len(ms), "refused": len(refused), "first_refusal": refused[0] if refused else None,
            "p50_ms": round(float(np.percentile(ms, 50)), 2) if len(ms) else None,
            "p99_ms": round(float(np.percentile(ms, 99)), 2) if len(ms) else None,
        },
        "bulk_texts_per_s": round(bulk_done[0] * bulk_texts / wall, 1),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repository", type=Path, default=Path("model_repository"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--bulk-clients", type=int, default=4)
    p.add_argument("--bulk-texts", type=int, default=16)
    p.add_argument("--output", type=Path, default=Path("reports/queue-order.json"))
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    texts = [x.text for x in build_pool(LoadTestConfig(payload="corpus"), "text")]
    results: dict[str, list] = {order: [] for order in ORDERS}
    with tempfile.TemporaryDirectory() as tmp:
        repos = {}
        for order in ORDERS:
            repos[order] = linked_copy(args.repository.resolve(), Path(tmp) / order)
            set_parameter(repos[order] / "embed", "queue_order", order)
        for r in range(args.rounds):
            for order in ORDERS:
                with processes.running(repos[order], Path(tmp) / f"{order}.log") as server:
                    row = asyncio.run(mixed(server.grpc_url, texts, args.seconds, args.bulk_clients, args.bulk_texts))
                log.info("round %d %s %s", r, order, json.dumps(row))
                results[order].append(row)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps({"cpu": platform.processor() or platform.machine(), "results": results}, indent=2)
    )


if __name__ == "__main__":
    main()
