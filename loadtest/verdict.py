"""SLO verdict over measured steps, and the find-max search over concurrency or rate."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from loadtest import EXIT_BREACHED, EXIT_COULD_NOT_RUN, EXIT_MET
from loadtest.stats import StepResult

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    exit_code: int
    reasons: list[str] = field(default_factory=list)

    @property
    def met(self) -> bool:
        return self.exit_code == EXIT_MET

    def line(self) -> str:
        if self.met:
            return "SLO met"
        word = "SLO breached" if self.exit_code == EXIT_BREACHED else "could not run"
        return f"{word}: " + "; ".join(self.reasons)


def step_breaches(
    step: StepResult, budget_ms: float, percentiles: tuple[float, ...], max_error_rate: float
) -> list[str]:
    """Why one step misses the SLO (empty when it meets it)."""
    reasons = []
    for p in percentiles:
        value = _percentile(step, p)
        if not value <= budget_ms:  # NaN (nothing completed) is a breach too
            reasons.append(f"p{p:g} {value:.2f} ms > {budget_ms:g} ms at {step.mode} load {step.load:g}")
    if step.error_rate > max_error_rate:
        failures = ", ".join(f"{k}={v}" for k, v in step.failures.items())
        reasons.append(f"{step.failed}/{step.sent} failed ({failures}) at {step.mode} load {step.load:g}")
    return reasons


def _percentile(step: StepResult, p: float) -> float:
    if p in step.latency.percentiles:
        return step.latency.percentiles[p]
    return float("nan")


def judge(steps: list[StepResult], budget_ms: float, percentiles: tuple[float, ...], max_error_rate: float) -> Verdict:
    """Every step must keep every SLO percentile within budget and its error rate within the limit.

    A step where not a single request completed means the test could not run (exit 2), not a breach.
    """
    if not steps:
        return Verdict(EXIT_COULD_NOT_RUN, ["no step was measured"])
    dead = [s for s in steps if s.completed == 0]
    if dead:
        s = dead[0]
        failures = ", ".join(f"{k}={v}" for k, v in s.failures.items()) or "none sent"
        return Verdict(EXIT_COULD_NOT_RUN, [f"no request completed at {s.mode} load {s.load:g} ({failures})"])
    reasons = [r for s in steps for r in step_breaches(s, budget_ms, percentiles, max_error_rate)]
    return Verdict(EXIT_BREACHED if reasons else EXIT_MET, reasons)


Probe = Callable[[float], Awaitable[StepResult]]


@dataclass
class SearchResult:
    best: StepResult | None
    probes: list[StepResult]


async def find_max(
    probe: Probe,
    start: float,
    limit: float,
    ok: Callable[[StepResult], bool],
    integer: bool,
    max_probes: int = 10,
    precision: float = 0.05,
) -> SearchResult:
    """Highest load (concurrency or rate) for which `ok` holds, like perf_analyzer's latency threshold.

    Doubles the load from `start` until a probe fails `ok` or `limit` is reached, then bisects between the
    last good and first bad load until they are within `precision` (relative; 1 for integers) or the
    probe budget is spent. The best step is the good probe with the highest throughput.
    """
    probes: list[StepResult] = []
    good: float | None = None
    bad: float | None = None

    async def run(load: float) -> bool:
        step = await probe(load)
        probes.append(step)
        passed = ok(step)
        logger.info("find-max probe load %g: %.1f req/s, %s", load, step.throughput, "ok" if passed else "over")
        return passed

    load = start
    while len(probes) < max_probes:
        if await run(load):
            good = load
            if load >= limit:
                break
            load = min(load * 2, limit)
        else:
            bad = load
            break
    while good is not None and bad is not None and len(probes) < max_probes:
        gap = bad - good
        if (integer and gap <= 1) or (not integer and gap <= precision * good):
            break
        mid = math.floor((good + bad) / 2) if integer else (good + bad) / 2
        if await run(mid):
            good = mid
        else:
            bad = mid
    passing = [s for s in probes if ok(s)]
    best = max(passing, key=lambda s: s.throughput) if passing else None
    return SearchResult(best=best, probes=probes)
