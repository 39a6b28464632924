"""One load-test run: ready check, uncounted warm-up, measured steps (sweep or find-max), reports, verdict."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from tqdm import tqdm

from loadtest import EXIT_BREACHED, EXIT_COULD_NOT_RUN, EXIT_MET, CouldNotRunError
from loadtest.client import TritonClient
from loadtest.config import LoadTestConfig
from loadtest.metrics import LoadTestMetrics
from loadtest.payload import Payload, build_pool, token_summary
from loadtest.report import console_table, write_csv, write_json, write_plot
from loadtest.schedule import run_closed, run_open
from loadtest.server_stats import breakdown, snapshot
from loadtest.stats import StepRecorder, StepResult, finish_step
from loadtest.verdict import SearchResult, Verdict, find_max, judge, step_breaches

logger = logging.getLogger(__name__)


class Runner:
    def __init__(self, config: LoadTestConfig, client: TritonClient, pool: list[Payload], metrics: LoadTestMetrics):
        self.config, self.client, self.pool, self.metrics = config, client, pool, metrics
        self._rng = np.random.default_rng(config.seed)

    async def warmup(self) -> None:
        """Uncounted traffic before measuring; fails the run early if not one request succeeds."""
        cfg = self.config
        if cfg.warmup_s <= 0:
            return
        recorder = StepRecorder()
        concurrency = int(cfg.loads[0]) if cfg.mode == "closed" else 1
        await run_closed(self.client.infer, self.pool, concurrency, cfg.warmup_s, 0, recorder)
        logger.info(
            "warm-up: %d requests, %d ok, failures %s",
            recorder.sent,
            recorder.completed,
            {k: v for k, v in recorder.outcomes.items() if k != "ok"} or "none",
        )
        if recorder.completed == 0:
            failures = ", ".join(f"{k}={v}" for k, v in recorder.outcomes.items()) or "none sent"
            raise CouldNotRunError(f"every warm-up request to '{cfg.model}' failed ({failures})")

    async def measure(self, load: float) -> StepResult:
        cfg = self.config
        self.metrics.target_load.set(load)
        recorder = StepRecorder()
        before = snapshot(await self.client.statistics())
        async with self._progress(load, recorder):
            if cfg.mode == "closed":
                elapsed = await run_closed(
                    self.client.infer,
                    self.pool,
                    int(load),
                    cfg.duration_s,
                    cfg.requests,
                    recorder,
                    observe=self.metrics.observe,
                )
            else:
                elapsed = await run_open(
                    self.client.infer,
                    self.pool,
                    load,
                    cfg.arrival,
                    cfg.duration_s,
                    cfg.requests,
                    recorder,
                    self._rng,
                    cfg.max_inflight,
                    observe=self.metrics.observe,
                )
        after = snapshot(await self.client.statistics())
        step = finish_step(recorder, cfg.mode, load, elapsed, breakdown(before, after))
        logger.info(
            "step %s %g: %d sent, %d ok, %d failed, %.1f req/s, p50 %.2f ms, p99 %.2f ms",
            cfg.mode,
            load,
            step.sent,
            step.completed,
            step.failed,
            step.throughput,
            step.latency.at(50.0),
            step.latency.at(99.0),
        )
        return step

    @contextlib.asynccontextmanager
    async def _progress(self, load: float, recorder: StepRecorder) -> AsyncIterator[None]:
        cfg = self.config
        label = f"{'concurrency' if cfg.mode == 'closed' else 'rate'} {load:g}"
        total = cfg.requests if cfg.requests and not cfg.duration_s else None
        bar = tqdm(
            total=total or cfg.duration_s,
            desc=label,
            unit="req" if total else "s",
            disable=None if cfg.progress else True,
            leave=False,
            bar_format=None,
        )
        start = time.perf_counter()

        async def tick() -> None:
            while True:
                await asyncio.sleep(0.5)
                bar.n = recorder.sent if total else min(time.perf_counter() - start, cfg.duration_s)
                bar.set_postfix(ok=recorder.completed, failed=recorder.failed, refresh=False)
                bar.refresh()

        task = asyncio.create_task(tick())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            bar.close()

    async def sweep(self) -> list[StepResult]:
        return [await self.measure(load) for load in self.config.loads]

    async def search(self) -> SearchResult:
        cfg = self.config

        def ok(step: StepResult) -> bool:
            return not step_breaches(step, cfg.budget_ms, (cfg.find_max_percentile,), cfg.max_error_rate)

        return await find_max(
            self.measure,
            cfg.loads[0],
            cfg.find_max_limit,
            ok,
            integer=cfg.mode == "closed",
            max_probes=cfg.find_max_probes,
        )


async def _run(config: LoadTestConfig) -> tuple[list[Payload], list[StepResult], SearchResult | None]:
    kind: type = TritonClient
    if config.protocol == "openai":  # imported only here: gRPC and KServe HTTP runs need no aiohttp
        from loadtest.openai_client import OpenAIClient

        kind = OpenAIClient
    client = kind(config.url, config.protocol, config.model, config.request_timeout_s)
    metrics = LoadTestMetrics(config.model, config.mode)
    try:
        model_inputs = await client.wait_ready(config.ready_timeout_s)
        pool = build_pool(config, model_inputs)
        try:
            metrics.serve(config.metrics_port, config.metrics_address)
        except OSError as exc:
            raise CouldNotRunError(f"metrics port {config.metrics_port}: {exc.strerror}") from exc
        runner = Runner(config, client, pool, metrics)
        await runner.warmup()
        if config.find_max:
            result = await runner.search()
            return pool, sorted(result.probes, key=lambda s: s.load), result
        return pool, await runner.sweep(), None
    finally:
        metrics.stop()
        await client.close()


def run(config: LoadTestConfig, out: TextIO) -> int:
    """Run the configured test, write the reports, print the table and verdict; returns the exit code."""
    logger.info("effective config: %s", json.dumps(config.as_dict(), default=str))
    pool, steps, search = asyncio.run(_run(config))
    verdict = judge(steps, config.budget_ms, config.slo_percentiles, config.max_error_rate)
    extra: dict[str, Any] = {"tokens": token_summary(pool)}
    if search is not None:
        verdict = _search_verdict(search, config)
        extra["find_max"] = search.best.as_dict() if search.best else None
    extra["verdict"] = {"exit_code": verdict.exit_code, "reasons": verdict.reasons}

    console_table(steps, config.model, out)
    if search is not None:
        best = search.best
        out.write(
            f"find-max: p{config.find_max_percentile:g} <= {config.budget_ms:g} ms up to {config.mode} load "
            f"{best.load:g} ({best.throughput:.1f} req/s)\n"
            if best
            else "find-max: no load met the budget\n"
        )
    _write_reports(config, steps, extra, out)
    out.write(verdict.line() + "\n")
    return verdict.exit_code


def _search_verdict(search: SearchResult, config: LoadTestConfig) -> Verdict:
    """With --find-max, probes past the maximum breach by design: met means some probed load met the budget."""
    if search.best is not None:
        return Verdict(EXIT_MET)
    if not any(s.completed for s in search.probes):
        return Verdict(EXIT_COULD_NOT_RUN, ["no request completed in any find-max probe"])
    p = f"p{config.find_max_percentile:g}"
    return Verdict(EXIT_BREACHED, [f"no probed load kept {p} within {config.budget_ms:g} ms"])


def _write_reports(config: LoadTestConfig, steps: list[StepResult], extra: dict[str, Any], out: TextIO) -> None:
    directory = Path(config.output_dir)
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / f"{config.model}_{config.mode}"
    write_json(stem.with_suffix(".json"), config.as_dict(), steps, extra)
    write_csv(stem.with_suffix(".csv"), steps, config.model)
    written = [stem.with_suffix(".json"), stem.with_suffix(".csv")]
    title = f"{config.model} over {config.protocol}, {config.mode} loop"
    if config.plot and write_plot(stem.with_suffix(".png"), steps, config.budget_ms, title):
        written.append(stem.with_suffix(".png"))
    out.write("reports: " + ", ".join(str(p) for p in written) + "\n")
