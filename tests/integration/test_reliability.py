"""Faults and overload against the real tritonserver (bounded runs from reliability/, on loopback)."""

from __future__ import annotations

import asyncio

import pytest

from export.model_configs import QueuePolicy
from reliability import processes, scenarios
from reliability.copies import python_tokenizer_copy, shedding_copy

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.reliability]


@pytest.fixture()
def shedding_server(exported_repository, tmp_path):
    """The exported repository with the generated default shedding in bert."""
    repo = shedding_copy(exported_repository, tmp_path / "repo", QueuePolicy.for_batch(32))
    with processes.running(repo, tmp_path / "server.log") as server:
        yield server


def test_a_shedding_copy_gives_every_native_model_that_sheds_the_policys_deadline(exported_repository, tmp_path):
    """The scenarios call embed, one native model: its deadline is the one under test, as bert's is."""
    repo = shedding_copy(exported_repository, tmp_path / "repo", QueuePolicy.for_batch(32, timeout_us=123_000))
    for model in ("embed", "bert"):
        config = (repo / model / "config.pbtxt").read_text()
        assert 'key: "deadline_us"\n  value {\n    string_value: "123000"' in config, (model, config)
    assert (exported_repository / "embed" / "config.pbtxt").read_text() != (repo / "embed" / "config.pbtxt").read_text()


def test_overload_is_shed_fast_with_unavailable_and_the_server_recovers(shedding_server):
    r = asyncio.run(scenarios.overload(shedding_server, factor=3.0, seconds=8.0))
    over = r["overload"]
    assert over["accounted"] and over["sent"] > 2 * r["capacity_per_s"] * 8
    assert set(over["statuses"]) <= {"ok", "UNAVAILABLE"}, r["overload_messages"]
    assert over["statuses"].get("UNAVAILABLE", 0) > over["sent"] // 4  # the excess is refused ...
    assert r["overload_rejected_p50_ms"] < 250  # ... at once, not after queueing without bound
    assert over["completed"] > 0
    # Recovered at once: light load right after is served (a stray queue timeout is allowed on shared cores).
    assert r["after"]["accounted"] and r["after"]["failed"] <= max(1, r["after"]["sent"] // 50) and r["ready_after"]


def test_killed_tokenizer_stub_is_restarted_and_only_in_flight_requests_fail(exported_repository, tmp_path):
    """The tokenizer in its Python stub (the default export serves it natively, with no stub)."""
    shed = shedding_copy(exported_repository, tmp_path / "shed", QueuePolicy.for_batch(32))
    repo = python_tokenizer_copy(shed, tmp_path / "repo")
    with processes.running(repo, tmp_path / "server.log") as server:
        r = asyncio.run(scenarios.stub_kill(server, model="tokenizer", rate=30.0, seconds=35.0, kill_at_s=4.0))
    assert r["run"]["accounted"]
    assert r["stub_pid"]["new"] not in (None, r["stub_pid"]["killed"])
    assert r["back_to_ready_s"] is not None and r["back_to_ready_s"] < 30
    assert r["ok_after_last_error"] > 0 and r["ready_after"]
    assert r["errors"] < r["run"]["sent"] // 2


def test_whole_server_restart_is_ridden_out_by_client_retries(exported_repository, tmp_path):
    repo = shedding_copy(exported_repository, tmp_path / "repo", QueuePolicy.for_batch(32))
    server = processes.start(repo, tmp_path / "server.log")
    try:
        server.wait_ready()
        server, r = asyncio.run(scenarios.restart(server, repo, tmp_path / "server2.log", seconds=35.0))
        assert r["calls_spanning_outage"] > 0 and r["spanning_ok"] == r["calls_spanning_outage"], r
        assert set(r["outcomes"]) == {"ok"}, r
        # Backoff is capped at 1 s: a caller is back within about a second of the new server being ready.
        assert r["first_ok_after_ready_s"] is not None and r["first_ok_after_ready_s"] < 2.5
    finally:
        processes.stop(server)
