"""Closed-loop load over HTTP with JSON outputs, the way curl and most SDKs call: KServe v2 JSON in, JSON out.

    python -m bench.http_json --url 127.0.0.1:8000 --model embed --texts 32 --concurrency 1,64 --duration-s 6
    python -m bench.http_json --url 127.0.0.1:8080 --route openai --texts 32   # the gateway's OpenAI route

    python -m bench.http_json --url 127.0.0.1:8080 --route openai-sdk --texts 32   # the same through OpenAI's SDK

perf_analyzer asks for binary outputs, which hides the cost of the server formatting floats as JSON text. Each
client is a thread with a keep-alive connection; threads are spread over processes so that the client's own
interpreter does not cap the rate. Prints one JSON line per concurrency: requests and texts per second, p50, p99,
and p50 to the response's last byte (``body_p50_ms``: the server's part, before the client parses the JSON). The
route ``openai-sdk`` calls through the ``openai`` package, which asks for base64 vectors unless told otherwise.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import multiprocessing
import threading
import time

import numpy as np

from loadtest.config import LoadTestConfig, int_list
from loadtest.payload import build_pool

log = logging.getLogger(__name__)


SDK = "sdk"  # the path that says: call through the openai package


def _body(route: str, model: str, texts: list[str]) -> bytes:
    if route.startswith("openai"):
        return json.dumps({"model": model, "input": texts}).encode()
    return json.dumps(
        {
            "inputs": [{"name": "TEXT", "shape": [len(texts), 1], "datatype": "BYTES", "data": texts}],
            "outputs": [{"name": "EMBEDDING"}],
        }
    ).encode()


def _client(url: str, path: str, bodies: list[bytes], stop_at: float, out: list[tuple], failures: list[str]) -> None:
    if path == SDK:
        return _sdk_client(url, bodies, stop_at, out, failures)
    host, port = url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    i = 0
    while time.perf_counter() < stop_at:
        start = time.perf_counter()
        conn.request("POST", path, bodies[i % len(bodies)], {"Content-Type": "application/json"})
        response = conn.getresponse()
        payload = response.read()
        body = time.perf_counter()
        if response.status == 200:
            json.loads(payload)  # as a client would
            out.append((time.perf_counter() - start, body - start))
        else:
            failures.append(f"{response.status}: {payload[:120]!r}")
        i += 1


def _sdk_client(url: str, bodies: list[bytes], stop_at: float, out: list[tuple], failures: list[str]) -> None:
    import openai

    client = openai.OpenAI(base_url=f"http://{url}/v1", api_key="unused", max_retries=0, timeout=30)
    requests = [json.loads(b) for b in bodies]
    i = 0
    while time.perf_counter() < stop_at:
        start = time.perf_counter()
        try:
            client.embeddings.create(**requests[i % len(requests)])
            out.append((time.perf_counter() - start, float("nan")))
        except openai.APIError as e:
            failures.append(repr(e)[:160])
        i += 1


def _process(args: tuple[str, str, list[bytes], int, float]) -> tuple[list[float], list[str]]:
    url, path, bodies, threads, stop_at = args
    out: list[tuple] = []
    failures: list[str] = []
    workers = [
        threading.Thread(target=_client, args=(url, path, bodies, stop_at, out, failures)) for _ in range(threads)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return out, failures


def run(
    url: str, model: str, texts: int, concurrency: int, duration_s: float, processes: int, route: str = "kserve"
) -> dict:
    """``route``: ``kserve`` (Triton's /v2/models/<model>/infer), ``openai`` (the gateway's /v1/embeddings, JSON
    floats) or ``openai-sdk`` (the same route through the openai package)."""
    pool = [p.text for p in build_pool(LoadTestConfig(payload="corpus"), "text")]
    rng = np.random.default_rng(0)
    bodies = [_body(route, model, [pool[j] for j in rng.integers(0, len(pool), texts)]) for _ in range(64)]
    path = {"openai": "/v1/embeddings", "openai-sdk": SDK}.get(route, f"/v2/models/{model}/infer")
    procs = max(1, min(processes, concurrency))
    per = [concurrency // procs + (1 if k < concurrency % procs else 0) for k in range(procs)]
    warm_until = time.perf_counter() + 1.0
    _process((url, path, bodies[:4], 1, warm_until))
    stop_at = time.perf_counter() + duration_s
    with multiprocessing.get_context("fork").Pool(procs) as workers:
        results = workers.map(_process, [(url, path, bodies, n, stop_at) for n in per])
    latencies = np.array([x[0] for r in results for x in r[0]])
    bodies_s = np.array([x[1] for r in results for x in r[0]])
    failures = [f for r in results for f in r[1]]
    done = len(latencies)
    return {
        "model": model, "route": route, "texts_per_request": texts, "concurrency": concurrency, "requests": done,
        "failed": len(failures), "first_failure": failures[0] if failures else None,
        "requests_per_s": round(done / duration_s, 1), "texts_per_s": round(done * texts / duration_s, 1),
        "p50_ms": round(float(np.percentile(latencies, 50)) * 1e3, 3) if done else None,
        "p99_ms": round(float(np.percentile(latencies, 99)) * 1e3, 3) if done else None,
        "body_p50_ms": round(float(np.percentile(bodies_s, 50)) * 1e3, 3) if done and route != "openai-sdk" else None,
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="127.0.0.1:8000")
    p.add_argument("--model", default="embed")
    p.add_argument("--texts", type=int, default=1)
    p.add_argument("--concurrency", type=int_list, default=(1,))
    p.add_argument("--duration-s", type=float, default=6.0)
    p.add_argument("--processes", type=int, default=8)
    p.add_argument(
        "--route",
        choices=("kserve", "openai", "openai-sdk"),
        default="kserve",
        help="openai: the gateway's /v1/embeddings; openai-sdk: the same through the openai package",
    )
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for c in args.concurrency:
        log.info(
            "%s", json.dumps(run(args.url, args.model, args.texts, c, args.duration_s, args.processes, args.route))
        )


if __name__ == "__main__":
    main()
