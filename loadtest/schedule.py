"""Load generation: closed loop (fixed concurrency) and open loop (Poisson or constant arrivals).

In open loop every request has an intended send time drawn from the arrival process before the run;
latency is measured from that intended time, so a server (or client) that stalls cannot hide the queueing
it causes (no coordinated omission). How late each actual send was is recorded as the send lag.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TypeVar

import numpy as np

from loadtest.stats import StepRecorder

P = TypeVar("P")
Send = Callable[[P], Awaitable[str]]
Observer = Callable[[str, float], None]
Clock = Callable[[], float]


def _noop(outcome: str, latency_s: float) -> None:
    return None


async def _send(send: Send[P], payload: P) -> str:
    """The request's outcome; an exception escaping `send` still ends as a counted failure."""
    try:
        return await send(payload)
    except asyncio.CancelledError:
        raise
    except Exception:
        return "client_error"


def arrival_offsets(rate: float, arrival: str, count: int, rng: np.random.Generator) -> np.ndarray:
    """Intended send times in seconds from the start: exponential gaps (Poisson) or even spacing."""
    if arrival == "poisson":
        gaps = rng.exponential(1.0 / rate, size=count)
    elif arrival == "constant":
        gaps = np.full(count, 1.0 / rate)
    else:
        raise ValueError(f"unknown arrival process {arrival!r}")
    return np.cumsum(gaps) - gaps[0]


def _planned_count(rate: float, duration_s: float, max_requests: int) -> int:
    by_time = int(np.ceil(rate * duration_s)) + 1 if duration_s > 0 else None
    if max_requests and by_time:
        return min(max_requests, by_time)
    return max_requests or by_time or 0


async def run_closed(
    send: Send[P],
    payloads: Sequence[P],
    concurrency: int,
    duration_s: float,
    max_requests: int,
    recorder: StepRecorder,
    observe: Observer = _noop,
    clock: Clock = time.perf_counter,
) -> float:
    """`concurrency` workers, each sending its next request as soon as the previous one answered.

    Stops sending at the deadline or after `max_requests`; requests in flight are awaited and counted.
    Returns the measured wall time in seconds.
    """
    tickets: Iterator[int] = itertools.count()
    start = clock()
    deadline = start + duration_s if duration_s > 0 else float("inf")

    async def worker() -> None:
        while True:
            n = next(tickets)
            if (max_requests and n >= max_requests) or clock() >= deadline:
                return
            payload = payloads[n % len(payloads)]
            recorder.on_sent()
            t0 = clock()
            outcome = await _send(send, payload)
            latency = clock() - t0
            recorder.on_done(outcome, latency)
            observe(outcome, latency)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return clock() - start


async def run_open(
    send: Send[P],
    payloads: Sequence[P],
    rate: float,
    arrival: str,
    duration_s: float,
    max_requests: int,
    recorder: StepRecorder,
    rng: np.random.Generator,
    max_inflight: int = 1024,
    observe: Observer = _noop,
    clock: Clock = time.perf_counter,
) -> float:
    """Send at `rate` requests/s regardless of how fast answers come; at most `max_inflight` at once.

    When the in-flight cap is reached the next send waits, which shows up as send lag and, because latency
    counts from the intended time, as latency too. Returns the wall time from start to the last answer.
    """
    offsets = arrival_offsets(rate, arrival, _planned_count(rate, duration_s, max_requests), rng)
    if duration_s > 0:
        offsets = offsets[offsets < duration_s]
    slots = asyncio.Semaphore(max_inflight)
    tasks: list[asyncio.Task[None]] = []

    async def one(payload: P, intended: float) -> None:
        try:
            outcome = await _send(send, payload)
            latency = clock() - intended
            recorder.on_done(outcome, latency)
            observe(outcome, latency)
        finally:
            slots.release()

    start = clock()
    for n, offset in enumerate(offsets):
        intended = start + float(offset)
        delay = intended - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        await slots.acquire()
        recorder.on_sent(lag_s=clock() - intended)
        tasks.append(asyncio.create_task(one(payloads[n % len(payloads)], intended)))
    if tasks:
        await asyncio.gather(*tasks)
    return clock() - start
