"""3x overload through the real nginx over two real replicas sheds the way one server does.

Each request reaches a replica exactly once (no retry of a refusal), refusals come back fast, no replica is taken
out of the upstream, and both keep serving. Over HTTP a refusal is a 503, which nginx sees; over gRPC it is
UNAVAILABLE in the trailers, which it does not.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter

import aiohttp
import numpy as np
import pytest

from export.model_configs import QueuePolicy
from reliability import traffic
from reliability.copies import linked_copy, rewrite_config
from tests.integration.conftest import ROOT, free_port, http_status

pytestmark = [pytest.mark.integration, pytest.mark.slow]
log = logging.getLogger(__name__)

FACTOR, SECONDS = 3.0, 6.0
TEXT = "the replicas shed load as one server does"
MARKED_DOWN = ("upstream server temporarily disabled", "no live upstreams")


def _requests_seen(metrics_port: int) -> float:
    """Every `embed` request that reached this replica, served or refused: the native model answers each once."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    pattern = r'^nv_inference_request_(?:success|failure)\{[^}]*model="embed"[^}]*\} (\S+)$'
    return sum(float(v) for v in re.findall(pattern, text, re.M))


def _settled_requests_seen(metrics_ports: list[int], poll_s: float = 0.25, tries: int = 40) -> list[float]:
    """The replicas' counts once two reads in a row agree: a request is counted just after its client has the
    answer, so a read right after the last answer can miss it (and the next run would then count it)."""
    seen = None
    for _ in range(tries):
        now = [_requests_seen(p) for p in metrics_ports]
        if now == seen:
            break
        seen = now
        time.sleep(poll_s)
    return now


@pytest.fixture(scope="module")
def two_replicas(exported_repository, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("overload")
    # A 100 ms deadline, so that a few seconds at 3x capacity are an overload whatever the costs learnt at load.
    repository = linked_copy(exported_repository, tmp / "repository")
    for model in ("embed", "bert"):
        rewrite_config(repository / model, QueuePolicy(max_queue_size=1, timeout_us=100_000))
    http, grpc, base = free_port(), free_port(), free_port() + 1000
    cmd = [sys.executable, "-m", "serving.launcher.replicas", "--replicas", "2", "--repository", str(repository),
           "--http-port", str(http), "--grpc-port", str(grpc), "--base-port", str(base),
           "--rate", "100000", "--burst", "100000", "--gateway-port", str(free_port())]  # fmt: skip
    log_path = tmp / "replicas.log"
    out = log_path.open("w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while http_status(f"http://127.0.0.1:{http}/v2/health/ready", timeout_s=1) != 200:
        assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()[-4000:]
        time.sleep(0.5)
    try:
        yield f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", [base + 2, base + 12], log_path
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
        out.close()


async def _capacity(grpc_url: str) -> float:
    client = traffic.grpc_client(grpc_url)
    start, done = time.perf_counter(), 0

    async def worker() -> None:
        nonlocal done
        inp = traffic.triton_grpc.InferInput("TEXT", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[TEXT.encode()]], dtype=np.object_))
        while time.perf_counter() - start < 4.0:
            # A client that waits up to 10 s: its timeout is its deadline, so the probe is served, never shed.
            await client.infer("embed", [inp], client_timeout=10, timeout=10_000_000)
            done += 1

    await asyncio.gather(*(worker() for _ in range(32)))
    await client.close()
    return done / (time.perf_counter() - start)


async def _open_loop(rate: float, seconds: float, call) -> list[tuple[float, str]]:
    """Poisson arrivals of ``call()``; (latency from the intended send time, its status) per request."""
    rng = np.random.default_rng(7)
    offsets = np.cumsum(rng.exponential(1.0 / rate, size=int(rate * seconds * 1.5) + 16))
    outcomes: list[tuple[float, str]] = []
    start = time.perf_counter()

    async def one(intended: float) -> None:
        status = await call()
        outcomes.append((time.perf_counter() - start - intended, status))

    tasks = []
    for off in offsets[offsets < seconds]:
        delay = start + off - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(float(off))))
    await asyncio.gather(*tasks)
    return outcomes


async def _http_overload(http_url: str, rate: float) -> list[tuple[float, str]]:
    body = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [TEXT]}]})
    connector = aiohttp.TCPConnector(limit=1024)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as session:

        async def call() -> str:
            try:
                async with session.post(f"http://{http_url}/v2/models/embed/infer", data=body) as r:
                    await r.read()
                    return str(r.status)
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                return type(e).__name__

        return await _open_loop(rate, SECONDS, call)


async def _grpc_overload(grpc_url: str, rate: float) -> list[tuple[float, str]]:
    client = traffic.grpc_client(grpc_url)
    inp = traffic.triton_grpc.InferInput("TEXT", [1, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[TEXT.encode()]], dtype=np.object_))

    async def call() -> str:
        try:
            await client.infer("embed", [inp], client_timeout=10)
            return "OK"
        except Exception as e:  # every failure is an outcome to count
            return traffic.status_and_message(e)[0]

    try:
        return await _open_loop(rate, SECONDS, call)
    finally:
        await client.close()


def _ms(latencies: list[float], q: float) -> float:
    return round(float(np.percentile(latencies, q)) * 1e3, 1) if latencies else float("nan")


def _marked_down(log_path) -> list[str]:
    return [line for line in log_path.read_text(errors="replace").splitlines() if any(m in line for m in MARKED_DOWN)]


def _overload(two_replicas, protocol: str) -> dict:
    http, grpc, metrics, log_path = two_replicas
    capacity = asyncio.run(_capacity(grpc))
    before = _settled_requests_seen(metrics)
    rate = FACTOR * capacity
    outcomes = asyncio.run(_http_overload(http, rate) if protocol == "http" else _grpc_overload(grpc, rate))
    after = _settled_requests_seen(metrics)
    ok_status, refused_status = ("200", "503") if protocol == "http" else ("OK", "UNAVAILABLE")
    ok = [lat for lat, status in outcomes if status == ok_status]
    refused = [lat for lat, status in outcomes if status == refused_status]
    figures = {
        "capacity_per_s": round(capacity, 1),
        "offered_per_s": round(rate, 1),
        "sent": len(outcomes),
        "statuses": dict(Counter(status for _, status in outcomes)),
        "accepted_p50_ms": _ms(ok, 50),
        "accepted_p99_ms": _ms(ok, 99),
        "refused_p50_ms": _ms(refused, 50),
        "refused_p99_ms": _ms(refused, 99),
        "seen_per_replica": [round(a - b) for a, b in zip(after, before, strict=True)],
    }
    log.info("%s, 3x overload through nginx over 2 replicas: %s", protocol, figures)
    assert refused, f"3x capacity was not an overload: {figures}"
    # Only served or shed: no 502 / 504 from nginx (no live replica, a replica taken out).
    assert set(figures["statuses"]) <= {ok_status, refused_status}, figures
    # Every request reached exactly one replica once: a retried refusal would be counted twice.
    assert sum(after) - sum(before) == len(outcomes), figures
    assert all(a > b for a, b in zip(after, before, strict=True)), f"a replica took no traffic: {figures}"
    assert not _marked_down(log_path), _marked_down(log_path)[:5]
    return figures


def test_http_overload_is_shed_like_one_server(two_replicas):
    figures = _overload(two_replicas, "http")
    assert figures["refused_p50_ms"] < 250, f"refusals are not fast: {figures}"  # as one server's (test_reliability)


def test_grpc_overload_is_shed_like_one_server(two_replicas):
    # Refusal latency is reported, not asserted, over gRPC: at ~400 calls/s from one Python client on the two
    # cores the servers use, refusals took 2.1 s at p50 (accepted 1.9 s) where HTTP's took 7 ms; whether that is
    # the client falling behind or nginx opening an upstream connection per stream is not yet measured apart.
    _overload(two_replicas, "grpc")
