"""SLO verdict and exit codes; the find-max search over a fake latency curve."""

from __future__ import annotations

import asyncio

import pytest

from loadtest import EXIT_BREACHED, EXIT_COULD_NOT_RUN, EXIT_MET
from loadtest.__main__ import main
from loadtest.stats import StepRecorder, StepResult, finish_step
from loadtest.verdict import find_max, judge, step_breaches


def make_step(load: float, latency_ms: float, ok: int = 100, failed: int = 0) -> StepResult:
    recorder = StepRecorder()
    for i in range(ok + failed):
        recorder.on_sent()
        recorder.on_done("ok" if i < ok else "unavailable", latency_ms / 1e3)
    return finish_step(recorder, "closed", load, 1.0)


def test_met_when_every_step_is_within_budget() -> None:
    verdict = judge([make_step(1, 3.0), make_step(2, 8.0)], 10.0, (50.0, 99.0), 0.0)
    assert verdict.exit_code == EXIT_MET and verdict.line() == "SLO met"


def test_a_tiny_budget_is_breached() -> None:
    verdict = judge([make_step(1, 3.0)], 0.001, (50.0, 99.0), 0.0)
    assert verdict.exit_code == EXIT_BREACHED
    assert "p99" in verdict.line() and "0.001 ms" in verdict.line()


def test_failures_beyond_the_error_budget_breach() -> None:
    step = make_step(4, 1.0, ok=99, failed=1)
    assert judge([step], 10.0, (99.0,), 0.0).exit_code == EXIT_BREACHED
    assert judge([step], 10.0, (99.0,), 0.05).exit_code == EXIT_MET
    assert "unavailable=1" in step_breaches(step, 10.0, (99.0,), 0.0)[0]


def test_a_step_with_nothing_completed_could_not_run() -> None:
    verdict = judge([make_step(1, 1.0, ok=0, failed=5)], 10.0, (99.0,), 0.0)
    assert verdict.exit_code == EXIT_COULD_NOT_RUN and "unavailable=5" in verdict.line()


def test_find_max_finds_the_knee_of_a_latency_curve() -> None:
    # Latency 1.9 ms per unit of load: the budget of 10 ms holds up to concurrency 5.
    async def probe(load: float) -> StepResult:
        return make_step(load, 1.9 * load, ok=int(100 * load))

    def ok(step: StepResult) -> bool:
        return not step_breaches(step, 10.0, (99.0,), 0.0)

    result = asyncio.run(find_max(probe, 1, 64, ok, integer=True, max_probes=10))
    assert result.best is not None and result.best.load == 5
    assert [s.load for s in result.probes][:4] == [1, 2, 4, 8]


def test_find_max_with_no_passing_load() -> None:
    async def probe(load: float) -> StepResult:
        return make_step(load, 50.0)

    result = asyncio.run(find_max(probe, 1, 64, lambda s: False, integer=True))
    assert result.best is None and len(result.probes) == 1


def test_unreachable_server_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--url", "127.0.0.1:9", "--ready-timeout-s", "0.5", "--metrics-port", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_COULD_NOT_RUN
    assert err[-1].startswith("loadtest: could not run: grpc://127.0.0.1:9")


def test_bad_argument_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mode", "sideways"]) == EXIT_COULD_NOT_RUN
    assert capsys.readouterr().err.strip() == "loadtest: could not run: mode must be closed or open"


def test_find_max_verdict_is_met_when_some_load_fits() -> None:
    from loadtest.config import LoadTestConfig
    from loadtest.runner import _search_verdict
    from loadtest.verdict import SearchResult

    config = LoadTestConfig(find_max=True)
    good, over, dead = make_step(1, 2.0), make_step(2, 50.0), make_step(4, 1.0, ok=0, failed=3)
    assert _search_verdict(SearchResult(good, [good, over, dead]), config).exit_code == EXIT_MET
    assert _search_verdict(SearchResult(None, [over]), config).exit_code == EXIT_BREACHED
    assert _search_verdict(SearchResult(None, [dead]), config).exit_code == EXIT_COULD_NOT_RUN
