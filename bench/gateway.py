"""``python -m bench.gateway``: the gateway's routes against direct KServe, interleaved, on one started server.

Variants, each one short text a request: KServe HTTP with JSON output (``/v2/models/embed/infer``, what the README's
curl sends), KServe HTTP with binary output, KServe gRPC from Python (the call the gateway makes), the gateway's
``/v1/embeddings`` (float and base64), TEI's ``/embed``, and ``/v1/embeddings`` on a second gateway whose requests
never share a call (``--max-calls 0``). At c=1 every iteration calls each variant once (order
rotated), so the shared machine's noise falls on all alike: p50/p99 per variant and the median of the paired
differences to KServe HTTP. At c=8, rounds cycle through the variants: req/s per round and its ratio to KServe HTTP's
in the same round (medians over rounds). The HTTP clients are aiohttp with keep-alive, in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import grpc
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc

from reliability import processes

log = logging.getLogger("bench.gateway")
BASELINE = "kserve_http_json"
TEXT = "The quick brown fox jumps over the lazy dog."  # 12 tokens with [CLS] and [SEP]


def _kserve_json(binary: bool) -> bytes:
    body = {"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [TEXT]}]}
    if binary:
        body["outputs"] = [{"name": "EMBEDDING", "parameters": {"binary_data": True}}]
    return json.dumps(body).encode()


def variants(server: processes.ServerProcess) -> dict[str, tuple[str, bytes]]:
    gw = f"http://{server.gateway_url}"
    return {
        "kserve_http_json": (f"http://{server.http_url}/v2/models/embed/infer", _kserve_json(False)),
        "kserve_http_binary": (f"http://{server.http_url}/v2/models/embed/infer", _kserve_json(True)),
        "kserve_grpc": ("grpc", b""),
        "openai_float": (f"{gw}/v1/embeddings", json.dumps({"model": "embed", "input": [TEXT]}).encode()),
        "openai_base64": (
            f"{gw}/v1/embeddings",
            json.dumps({"model": "embed", "input": [TEXT], "encoding_format": "base64"}).encode(),
        ),
        "tei_embed": (f"{gw}/embed", json.dumps({"inputs": TEXT}).encode()),
    }


def uncoalesced(server: processes.ServerProcess) -> tuple[subprocess.Popen, str]:
    """A second gateway on the same server, every request its own call (--max-calls 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "serving.gateway", "--port", str(port), "--triton-url", server.grpc_url,
           "--repository", str(server.repository), "--max-calls", "0"]  # fmt: skip
    return subprocess.Popen(cmd), f"http://127.0.0.1:{port}"


class Caller:
    def __init__(self, grpc_url: str) -> None:
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        self.channel = grpc.aio.insecure_channel(grpc_url)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.request = service_pb2.ModelInferRequest(model_name="embed")
        self.request.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1])
        self.request.raw_input_contents.append(len(TEXT.encode()).to_bytes(4, "little") + TEXT.encode())

    async def call(self, url: str, body: bytes) -> None:
        if url == "grpc":
            try:
                await self.stub.ModelInfer(self.request)
            except grpc.aio.AioRpcError as e:  # the server's connection age closed the channel: as the gateway does
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                await self.stub.ModelInfer(self.request)
            return
        async with self.session.post(url, data=body, headers={"content-type": "application/json"}) as r:
            await r.read()
            if r.status != 200:
                raise RuntimeError(f"{url}: {r.status}")

    async def close(self) -> None:
        await self.session.close()
        await self.channel.close()


async def _closed(caller: Caller, target: tuple[str, bytes], concurrency: int, requests: int) -> float:
    """``requests`` calls from ``concurrency`` workers; returns requests per second."""
    left = [requests]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            await caller.call(*target)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return requests / (time.perf_counter() - start)


async def latency(caller: Caller, targets: dict[str, tuple[str, bytes]], iterations: int) -> dict:
    """c=1, interleaved per request: each iteration calls every variant once, in an order rotated per iteration, so
    the box's noise falls on all alike; also the median of the per-iteration differences to KServe HTTP."""
    names = list(targets)
    lat: dict[str, list[float]] = {n: [] for n in names}
    for i in range(iterations):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            start = time.perf_counter()
            await caller.call(*targets[name])
            lat[name].append(time.perf_counter() - start)
    base = np.array(lat[BASELINE])
    return {
        n: {
            "p50_ms": float(np.percentile(v, 50) * 1e3),
            "p99_ms": float(np.percentile(v, 99) * 1e3),
            "paired_diff_p50_ms": float(np.median(np.array(v) - base) * 1e3),
            "requests": len(v),
        }
        for n, v in lat.items()
    }


async def throughput(caller: Caller, targets: dict[str, tuple[str, bytes]], rounds: int, requests: int) -> dict:
    """c=8, rounds that cycle through the variants (order rotated); req/s per round, and its ratio to KServe HTTP's
    in the same round."""
    names = list(targets)
    rates: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            rates[name].append(await _closed(caller, targets[name], 8, requests))
    base = np.array(rates[BASELINE])
    return {
        n: {"req_s": float(np.median(v)), "ratio_to_kserve_http": float(np.median(np.array(v) / base))}
        for n, v in rates.items()
    }


async def measure(
    server: processes.ServerProcess, uncoalesced_url: str, iterations: int, rounds: int, requests: int
) -> dict:
    caller = Caller(server.grpc_url)
    targets = variants(server)
    targets["openai_float_own_calls"] = (f"{uncoalesced_url}/v1/embeddings", targets["openai_float"][1])
    try:
        for target in targets.values():  # warm-up, uncounted
            await _closed(caller, target, 8, 100)
        return {
            "c1": await latency(caller, targets, iterations),
            "c8": await throughput(caller, targets, rounds, requests),
        }
    finally:
        await caller.close()


def cpu_model() -> str:
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def table(results: dict) -> str:
    lines = [
        "variant | c=1 p50 ms | c=1 p99 ms | c=1 p50 paired vs KServe HTTP | c=8 req/s | c=8 vs KServe HTTP",
        "--- | --- | --- | --- | --- | ---",
    ]
    for name, one in results["c1"].items():
        eight = results["c8"][name]
        lines.append(
            f"{name} | {one['p50_ms']:.2f} | {one['p99_ms']:.2f} | {one['paired_diff_p50_ms']:+.2f} ms | "
            f"{eight['req_s']:.0f} | {100 * eight['ratio_to_kserve_http']:.0f} %"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser(prog="python -m bench.gateway", description=__doc__.splitlines()[0])
    p.add_argument("--repository", type=Path, default=Path("model_repository"))
    p.add_argument("--iterations", type=int, default=1000, help="c=1: requests per variant, interleaved")
    p.add_argument("--rounds", type=int, default=12, help="c=8: rounds through the variants")
    p.add_argument("--requests", type=int, default=100, help="c=8: requests per variant per round")
    p.add_argument("--output", type=Path, default=Path("reports/gateway-cpu.json"))
    a = p.parse_args(argv)
    server = processes.start(a.repository.resolve(), Path("/tmp") / f"bench-gateway-{time.time_ns()}.log")
    try:
        server.wait_ready()
        second, second_url = uncoalesced(server)
        try:
            deadline = time.monotonic() + 30
            urls = (f"http://{server.gateway_url}", second_url)
            while not all(processes.http_status(f"{u}/health") == 200 for u in urls):
                if time.monotonic() > deadline:
                    raise RuntimeError("the gateways did not become healthy")
                time.sleep(0.2)
            results = asyncio.run(measure(server, second_url, a.iterations, a.rounds, a.requests))
        finally:
            second.terminate()
            second.wait(10)
    finally:
        processes.stop(server)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()}
    report = {"cpu": cpu_model(), "text": TEXT, **settings, "results": results}
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(report, indent=2) + "\n")
    sys.stdout.write(f"CPU: {report['cpu']}\n{table(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
