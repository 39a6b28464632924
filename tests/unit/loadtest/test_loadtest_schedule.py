"""Closed and open loop against fake servers: intended vs actual send times, accounting, concurrency."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from loadtest.schedule import arrival_offsets, run_closed, run_open
from loadtest.stats import StepRecorder, finish_step


class FakeServer:
    """Answers after `service_s`; with `serial`, one request at a time (a saturated single worker)."""

    def __init__(self, service_s: float, serial: bool = False, fail_every: int = 0) -> None:
        self.service_s, self.fail_every = service_s, fail_every
        self.lock = asyncio.Lock() if serial else None
        self.calls = self.in_flight = self.max_in_flight = 0

    async def __call__(self, payload: object) -> str:
        self.calls += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.lock is not None:
                async with self.lock:
                    await asyncio.sleep(self.service_s)
            else:
                await asyncio.sleep(self.service_s)
        finally:
            self.in_flight -= 1
        return "unavailable" if self.fail_every and self.calls % self.fail_every == 0 else "ok"


def test_poisson_offsets_are_seeded_and_have_the_right_rate() -> None:
    a = arrival_offsets(500.0, "poisson", 20_000, np.random.default_rng(3))
    b = arrival_offsets(500.0, "poisson", 20_000, np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)
    assert a[0] == 0.0 and np.all(np.diff(a) >= 0)
    assert np.mean(np.diff(a)) == pytest.approx(1 / 500.0, rel=0.03)


def test_constant_offsets_are_evenly_spaced() -> None:
    offsets = arrival_offsets(100.0, "constant", 5, np.random.default_rng(0))
    np.testing.assert_allclose(offsets, [0.0, 0.01, 0.02, 0.03, 0.04])


def test_open_loop_keeps_sending_on_schedule_while_a_slow_server_queues() -> None:
    # Capacity 100 req/s (10 ms, one at a time), offered 200 req/s for 0.5 s: a closed loop would slow down
    # and hide the queue; the open loop keeps to its schedule and the latency shows the queue growing.
    server = FakeServer(0.010, serial=True)
    recorder = StepRecorder()
    asyncio.run(run_open(server, [None], 200.0, "constant", 0.5, 0, recorder, np.random.default_rng(0)))
    step = finish_step(recorder, "open", 200.0, 1.0)
    assert step.sent == step.completed == 100
    # Sends stayed on time (ms); a loop that waited on the server would send at its 100/s and lag by up to 500 ms.
    # The p99 bound leaves room for a box whose other processes hold the CPU for a few scheduler ticks.
    assert step.send_lag is not None and step.send_lag.at(50.0) < 5.0 and step.send_lag.at(99.0) < 50.0
    assert step.latency.at(50.0) > 100.0  # about half the 0.5 s backlog: far above the 10 ms service
    assert step.latency.max_ms > 400.0


def test_closed_loop_on_the_same_slow_server_sees_only_service_time() -> None:
    server = FakeServer(0.010, serial=True)
    recorder = StepRecorder()
    asyncio.run(run_closed(server, [None], 1, 0.3, 0, recorder))
    step = finish_step(recorder, "closed", 1, 0.3)
    assert step.latency.at(50.0) == pytest.approx(10.0, abs=5.0)


def test_open_loop_inflight_cap_shows_as_send_lag_and_latency() -> None:
    server = FakeServer(0.020)
    recorder = StepRecorder()
    asyncio.run(run_open(server, [None], 200.0, "constant", 0.3, 0, recorder, np.random.default_rng(0), 1))
    step = finish_step(recorder, "open", 200.0, 1.0)
    assert server.max_in_flight == 1
    assert step.send_lag is not None and step.send_lag.max_ms > 100.0
    assert step.latency.max_ms >= step.send_lag.max_ms  # latency counts from the intended send time


def test_closed_loop_respects_concurrency_and_request_count() -> None:
    server = FakeServer(0.002, fail_every=4)
    recorder = StepRecorder()
    asyncio.run(run_closed(server, ["a", "b"], 3, 0, 50, recorder))
    step = finish_step(recorder, "closed", 3, 1.0)
    assert server.max_in_flight == 3
    assert step.sent == 50 == step.completed + step.failed
    assert step.failures == {"unavailable": 12}


def test_open_loop_request_count_bounds_the_step() -> None:
    server = FakeServer(0.001)
    recorder = StepRecorder()
    asyncio.run(run_open(server, [None], 1000.0, "poisson", 0, 25, recorder, np.random.default_rng(1)))
    assert recorder.sent == recorder.completed == server.calls == 25


def test_a_send_that_raises_is_still_counted() -> None:
    async def broken(payload: object) -> str:
        raise RuntimeError("boom")

    recorder = StepRecorder()
    asyncio.run(run_closed(broken, [None], 2, 0, 10, recorder))
    step = finish_step(recorder, "closed", 2, 1.0)
    assert step.sent == step.failed == 10 and step.failures == {"client_error": 10}
