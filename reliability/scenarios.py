"""The fault, overload and soak runs. Each takes a started server, bounds its own time and returns its figures."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import resource
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from reliability import processes, traffic
from reliability.processes import ServerProcess
from serving.client import AsyncEmbedClient, EmbedError

log = logging.getLogger(__name__)

LIGHT_RATE = 20.0  # requests/s well inside capacity: the unloaded reference
ONSET_S = 1.0  # the overload's first second, reported apart


async def capacity(server: ServerProcess, seconds: float = 6.0, concurrency: int = 32) -> float:
    """Completed requests/s at a fixed concurrency high enough to keep every batch full. Each request allows the
    10 s its client waits: a model's default deadline shorter than the queue these clients keep would refuse them,
    and the rate would measure that deadline rather than what the server drains."""
    run = await traffic.closed_loop(server.grpc_url, concurrency, seconds, server_timeout_us=10_000_000)
    return len(run.ok) / run.duration_s


def _cpu_seconds(server: ServerProcess) -> tuple[float, float]:
    """CPU seconds so far of tritonserver (and its stubs) and of this process, the load's client."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return sum(processes.cpu_seconds(p) for p in server.processes()), usage.ru_utime + usage.ru_stime


def _latency_ms(outcomes: list[traffic.Outcome], q: float) -> float:
    return round(float(np.percentile([o.latency_s for o in outcomes], q) * 1e3), 2) if outcomes else float("nan")


async def overload(server: ServerProcess, factor: float = 3.0, seconds: float = 8.0) -> dict[str, Any]:
    """Unloaded p99, capacity, then ``factor`` x capacity open loop, then light load again (recovery)."""
    url = server.grpc_url
    await traffic.open_loop(url, LIGHT_RATE, 2.0)  # uncounted warm-up
    unloaded = await traffic.open_loop(url, LIGHT_RATE, 8.0)
    cap = await capacity(server)
    server_cpu, client_cpu = _cpu_seconds(server)
    over = await traffic.open_loop(url, factor * cap, seconds, deadline_s=5.0, seed=1)
    server_cpu, client_cpu = (b - a for a, b in zip((server_cpu, client_cpu), _cpu_seconds(server), strict=True))
    after = await traffic.open_loop(url, LIGHT_RATE, 5.0, seed=2)
    rejected = [o for o in over.failed if o.status == "UNAVAILABLE"]
    steady = [o for o in over.window(ONSET_S, seconds) if o.status == "ok"]
    result = {
        "capacity_per_s": round(cap, 1),
        "unloaded": unloaded.summary(),
        "overload": over.summary(),
        "overload_rejected_p50_ms": _latency_ms(rejected, 50),
        "overload_rejected_p99_ms": _latency_ms(rejected, 99),
        # each distinct message once, its figures (ms queued, deadlines) as N: thousands differ only in those
        "overload_messages": sorted({re.sub(r"\d+(\.\d+)?", "N", o.message) for o in over.failed}),
        "accepted_p99_over_unloaded_p99": round(over.percentile_ms(99) / unloaded.percentile_ms(99), 2),
        # after the onset: what the first second admitted (before the server can tell an overload from a burst)
        # has been served, and the queue holds what the overload leaves it
        "after_onset_accepted_p99_ms": round(over.percentile_ms(99, steady), 2),
        "after_onset_accepted_p99_over_unloaded_p99": round(
            over.percentile_ms(99, steady) / unloaded.percentile_ms(99), 2
        ),
        "after_onset_served_per_s": round(len(steady) / max(seconds - ONSET_S, 1e-9), 1),
        # CPUs busy during the overload: a client that takes the server's cores slows what it measures
        "overload_server_cpus_busy": round(server_cpu / over.duration_s, 2),
        "overload_client_cpus_busy": round(client_cpu / over.duration_s, 2),
        "after": after.summary(),
        "ready_after": server.ready(),
    }
    log.info("overload: %s", result)
    return result


class ReadyWatch:
    """Polls a model's readiness in a thread and keeps the (time, ready) changes."""

    def __init__(self, server: ServerProcess, model: str, poll_s: float = 0.05) -> None:
        self.server, self.path, self.poll_s = server, f"/v2/models/{model}/ready", poll_s
        self.changes: list[tuple[float, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = None
        while not self._stop.is_set():
            ready = self.server.http_status(self.path, timeout_s=0.5) == 200
            if ready != last:
                self.changes.append((time.monotonic(), ready))
                last = ready
            self._stop.wait(self.poll_s)

    def __enter__(self) -> ReadyWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def stub_kill(
    server: ServerProcess, model: str = "tokenizer", rate: float = 40.0, seconds: float = 40.0, kill_at_s: float = 5.0
) -> dict[str, Any]:
    """SIGKILL the Python-backend stub of ``model`` under open-loop load on that model (a TEXT-in model: the
    tokenizer, which clients that want token ids call); measure the error burst and recovery."""
    url = server.grpc_url
    await traffic.open_loop(url, LIGHT_RATE, 2.0, model=model)
    old = server.stub_pid(model)
    with ReadyWatch(server, model) as watch:
        t0 = time.monotonic()
        load = asyncio.ensure_future(traffic.open_loop(url, rate, seconds, deadline_s=10.0, seed=3, model=model))
        await asyncio.sleep(kill_at_s)
        os.kill(old, signal.SIGKILL)
        killed = time.monotonic() - t0
        run = await load
    try:
        new = server.stub_pid(model)
    except LookupError:
        new = None
    failed = sorted(run.failed, key=lambda o: o.sent_s)
    after_kill = [o for o in run.outcomes if o.sent_s + o.latency_s >= killed]
    first_ok = min((o.sent_s + o.latency_s for o in after_kill if o.status == "ok"), default=None)
    last_fail = max((o.sent_s + o.latency_s for o in failed), default=None)
    back = next((t - t0 for t, ready in watch.changes if ready and t - t0 > killed), None)
    result = {
        "rate": rate,
        "run": run.summary(),
        "killed_at_s": round(killed, 2),
        "stub_pid": {"killed": old, "new": new},
        "errors": len(failed),
        "error_statuses": run.statuses(),
        "error_messages": sorted({o.message for o in failed}),
        "error_burst_s": round(failed[-1].sent_s - failed[0].sent_s, 2) if failed else 0.0,
        "last_error_after_kill_s": round(last_fail - killed, 2) if last_fail is not None else None,
        "first_ok_after_kill_s": round(first_ok - killed, 2) if first_ok is not None else None,
        "model_ready_changes_s": [(round(t - t0, 2), r) for t, r in watch.changes],
        "back_to_ready_s": round(back - killed, 2) if back is not None else None,
        "ok_after_last_error": sum(
            1 for o in run.outcomes if o.status == "ok" and last_fail is not None and o.sent_s > last_fail
        ),
        "ready_after": server.ready(),
    }
    log.info("stub kill: %s", result)
    return result


async def restart(
    server: ServerProcess, repository: Path, log_path: Path, seconds: float = 45.0, down_at_s: float = 3.0
) -> tuple[ServerProcess, dict[str, Any]]:
    """SIGKILL the whole server under load from ``serving.client`` callers, start a new one on the same ports;
    the callers keep their client objects and retry UNAVAILABLE with backoff inside their deadline."""
    ports = server.ports
    calls: list[tuple[float, float, str]] = []  # (start, end, outcome) since t0
    t0 = time.monotonic()
    stop_at = t0 + seconds

    async def caller(c: AsyncEmbedClient) -> None:
        while time.monotonic() < stop_at:
            start = time.monotonic()
            try:
                await c.embed(["restart under load"])
                outcome = "ok"
            except EmbedError as e:
                outcome = type(e).__name__
            calls.append((start - t0, time.monotonic() - t0, outcome))
            await asyncio.sleep(0.05)

    # A deadline longer than a restart and enough retries to span it: 0.1 s backoff doubling up to the client's
    # 1 s cap, so 40 retries wait ~36 s, inside the 40 s deadline (9 retries gave up after ~6.5 s).
    clients = [AsyncEmbedClient(server.grpc_url, timeout_s=40.0, retries=40, backoff_s=0.1) for _ in range(4)]
    tasks = [asyncio.ensure_future(caller(c)) for c in clients]
    await asyncio.sleep(down_at_s)
    down = time.monotonic() - t0
    processes.stop(server, sig=signal.SIGKILL)
    new = processes.start(repository, log_path, ports=ports)
    ready = await asyncio.to_thread(new.wait_ready, 180)
    up = time.monotonic() - t0
    await asyncio.gather(*tasks)
    for c in clients:
        await c.close()
    outcomes: dict[str, int] = {}
    for _, _, o in calls:
        outcomes[o] = outcomes.get(o, 0) + 1
    spanning = [c for c in calls if c[0] < up and c[1] > down]
    first_ok = min((end for _, end, o in calls if o == "ok" and end > up - 0.5), default=None)
    result = {
        "killed_at_s": round(down, 2),
        "new_server_ready_after_s": round(ready, 2),
        "outage_s": round(up - down, 2),
        "calls": len(calls),
        "outcomes": outcomes,
        "calls_spanning_outage": len(spanning),
        "spanning_ok": sum(1 for c in spanning if c[2] == "ok"),
        "first_ok_after_ready_s": round(first_ok - up, 2) if first_ok is not None else None,
        "max_call_s": round(max(end - start for start, end, _ in calls), 2) if calls else None,
    }
    log.info("restart: %s", result)
    return new, result


def _resources(server: ServerProcess) -> dict[str, int]:
    pids = server.processes()
    return {"rss_bytes": sum(processes.rss_bytes(p) for p in pids), "fds": sum(processes.open_fds(p) for p in pids)}


async def soak(
    server: ServerProcess, rate: float, seconds: float, window_s: float = 60.0, warmup_s: float = 60.0
) -> dict[str, Any]:
    """Open loop at ``rate`` for ``seconds`` in windows: per window p99, errors, resident memory and fds."""
    windows: list[dict[str, Any]] = []
    await traffic.open_loop(server.grpc_url, LIGHT_RATE, 2.0)
    client = traffic.grpc_client(server.grpc_url)
    try:
        elapsed, i = 0.0, 0
        while elapsed < seconds:
            span = min(window_s, seconds - elapsed)
            run = await traffic.open_loop(server.grpc_url, rate, span, seed=100 + i, client=client)
            windows.append({"start_s": elapsed, **run.summary(), **_resources(server)})
            log.info("soak window %d: %s", i, windows[-1])
            elapsed += span
            i += 1
    finally:
        await client.close()
    steady = [w for w in windows if w["start_s"] >= warmup_s] or windows[-1:]
    edge = max(1, round(300 / window_s)) if seconds >= 900 else 1  # first/last 5 minutes of a long soak
    first, last = windows[:edge], windows[-edge:]
    p99 = lambda ws: float(np.mean([w["p99_ms"] for w in ws]))  # noqa: E731
    return {
        "rate": rate,
        "seconds": seconds,
        "window_s": window_s,
        "windows": windows,
        "errors": sum(w["failed"] for w in windows),
        "sent": sum(w["sent"] for w in windows),
        "p99_first_ms": round(p99(first), 2),
        "p99_last_ms": round(p99(last), 2),
        "p99_drift": round(p99(last) / p99(first) - 1, 3),
        "rss_growth_after_warmup": round(steady[-1]["rss_bytes"] / steady[0]["rss_bytes"] - 1, 4),
        "fd_growth_after_warmup": steady[-1]["fds"] - steady[0]["fds"],
    }
