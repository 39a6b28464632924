"""Open-loop traffic with a per-request timeline, so that an error burst can be placed in time.

Every request is accounted for: ``sent == ok + failed`` once the run has drained, and each outcome keeps its
send time, its latency (from the intended send time, so queueing is not hidden) and its gRPC status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tritonclient.grpc as triton_grpc
from tritonclient.utils import InferenceServerException

from serving.client import connect, status_of

log = logging.getLogger(__name__)

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Triton serves the exported BERT encoder on the CPU.",
    "A short query about embeddings",
    "Load shedding answers excess requests at once instead of queueing them.",
)


@dataclass(frozen=True)
class Outcome:
    sent_s: float  # intended send time, seconds since the start of the run
    latency_s: float
    status: str  # "ok" or the gRPC status name (UNAVAILABLE, DEADLINE_EXCEEDED, ...)
    message: str = ""


@dataclass
class Run:
    duration_s: float
    rate: float
    outcomes: list[Outcome] = field(default_factory=list)
    sent: int = 0

    @property
    def ok(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "ok"]

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status != "ok"]

    def statuses(self) -> dict[str, int]:
        return dict(Counter(o.status for o in self.outcomes))

    def percentile_ms(self, q: float, outcomes: list[Outcome] | None = None) -> float:
        lat = [o.latency_s for o in (self.ok if outcomes is None else outcomes)]
        return float(np.percentile(lat, q) * 1e3) if lat else float("nan")

    def window(self, start_s: float, end_s: float) -> list[Outcome]:
        return [o for o in self.outcomes if start_s <= o.sent_s < end_s]

    def summary(self) -> dict[str, Any]:
        ok = self.ok
        return {
            "rate": self.rate,
            "duration_s": self.duration_s,
            "sent": self.sent,
            "completed": len(ok),
            "failed": len(self.failed),
            "statuses": self.statuses(),
            "throughput_ok_per_s": round(len(ok) / self.duration_s, 1) if self.duration_s else 0.0,
            "p50_ms": round(self.percentile_ms(50), 2),
            "p99_ms": round(self.percentile_ms(99), 2),
            "accounted": self.sent == len(ok) + len(self.failed),
        }


def status_and_message(exc: BaseException) -> tuple[str, str]:
    """The failed call's status (serving.client.status_of) and what the server or the client said."""
    if isinstance(exc, InferenceServerException):
        return status_of(exc), exc.message() or ""
    if isinstance(exc, asyncio.TimeoutError):
        return status_of(exc), "client-side deadline"
    return status_of(exc), f"{type(exc).__name__}: {exc}"


def grpc_client(url: str) -> Any:
    """An asyncio gRPC client made as every client of the project makes one (serving.client.connect)."""
    return connect(url, "grpc", aio=True)[1]


def _inputs(text: str) -> list[Any]:
    inp = triton_grpc.InferInput("TEXT", [1, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[text.encode()]], dtype=np.object_))
    return [inp]


async def open_loop(
    url: str,
    rate: float,
    duration_s: float,
    *,
    deadline_s: float = 2.0,
    server_timeout_us: int | None = None,
    model: str = "embed",
    seed: int = 0,
    max_inflight: int = 4096,
    client: Any = None,
) -> Run:
    """Poisson arrivals at ``rate`` for ``duration_s``; each request carries a gRPC deadline of ``deadline_s``
    and, when given, Triton's per-request queue ``timeout`` (microseconds). Waits for every request to end."""
    own = client is None
    client = client or grpc_client(url)
    rng = np.random.default_rng(seed)
    offsets = np.cumsum(rng.exponential(1.0 / rate, size=int(rate * duration_s * 1.5) + 16))
    offsets = offsets[offsets < duration_s]
    run = Run(duration_s, rate)
    inflight: set[asyncio.Task] = set()
    start = time.perf_counter()

    async def one(i: int, intended: float) -> None:
        kw: dict[str, Any] = {"client_timeout": deadline_s}
        if server_timeout_us is not None:
            kw["timeout"] = server_timeout_us
        try:
            await client.infer(model, _inputs(SENTENCES[i % len(SENTENCES)]), **kw)
            status, message = "ok", ""
        except Exception as e:  # every failure is an outcome to count, never a crash of the run
            status, message = status_and_message(e)
        run.outcomes.append(Outcome(intended, time.perf_counter() - start - intended, status, message))

    try:
        for i, off in enumerate(offsets):
            delay = start + off - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if len(inflight) >= max_inflight:
                run.outcomes.append(Outcome(float(off), 0.0, "CLIENT_OVERFLOW", "too many requests in flight"))
                run.sent += 1
                continue
            task = asyncio.ensure_future(one(i, float(off)))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
            run.sent += 1
        if inflight:
            await asyncio.wait(inflight, timeout=deadline_s + 5)
    finally:
        if own:
            with contextlib.suppress(Exception):
                await client.close()
    missing = run.sent - len(run.outcomes)
    if missing:
        log.error("%d requests never ended", missing)
    return run


async def closed_loop(
    url: str, concurrency: int, duration_s: float, *, model: str = "embed", server_timeout_us: int | None = None
) -> Run:
    """``concurrency`` workers back to back for ``duration_s``: the completed rate is the capacity. Each request
    carries Triton's ``timeout`` (microseconds) when given: the deadline the native models admit it by."""
    client = grpc_client(url)
    run = Run(duration_s, 0.0)
    start = time.perf_counter()

    async def worker(w: int) -> None:
        i = w
        while time.perf_counter() - start < duration_s:
            sent = time.perf_counter() - start
            run.sent += 1
            try:
                kw: dict[str, Any] = {} if server_timeout_us is None else {"timeout": server_timeout_us}
                await client.infer(model, _inputs(SENTENCES[i % len(SENTENCES)]), client_timeout=10.0, **kw)
                status, message = "ok", ""
            except Exception as e:  # counted, never fatal
                status, message = status_and_message(e)
            run.outcomes.append(Outcome(sent, time.perf_counter() - start - sent, status, message))
            i += concurrency

    try:
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    finally:
        await client.close()
    run.duration_s = time.perf_counter() - start
    return run
