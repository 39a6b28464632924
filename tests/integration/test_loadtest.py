"""The load tester against the real tritonserver serving the exported default model (short runs)."""

from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from loadtest import EXIT_BREACHED, EXIT_COULD_NOT_RUN, EXIT_MET
from loadtest.__main__ import main

pytestmark = pytest.mark.integration

SHORT = ["--duration-s", "2", "--warmup-s", "1", "--metrics-port", "0", "--no-progress"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(server: Any, out: Path, *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["--url", server.grpc_url, "--output-dir", str(out), *SHORT, *args])
    reports = sorted(out.glob("*.json"))
    return code, json.loads(reports[0].read_text()) if reports else {}


def test_closed_loop_against_the_default_model(triton_server: Any, tmp_path: Path) -> None:
    code, doc = run(triton_server, tmp_path, "--concurrency", "1,2", "--budget-ms", "10000")
    assert code == EXIT_MET, doc.get("verdict")
    assert [s["load"] for s in doc["steps"]] == [1.0, 2.0]
    for step in doc["steps"]:
        assert step["sent"] == step["completed"] + step["failed"] and step["failed"] == 0
        assert step["completed"] > 0 and 0 < step["latency"]["p50_ms"] <= step["latency"]["p99_ms"]
        assert step["server"], "Triton's statistics API showed no server-side time"
    assert (tmp_path / "embed_closed.csv").is_file()
    assert doc["tokens"]["median"] >= 20


def test_client_latency_covers_server_time(triton_server: Any, tmp_path: Path) -> None:
    code, doc = run(triton_server, tmp_path, "--concurrency", "1", "--budget-ms", "10000")
    step = doc["steps"][0]
    server_ms = sum(row["total_us"] for name, row in step["server"].items() if name == "embed") / 1e3
    assert code == EXIT_MET
    assert step["latency"]["mean_ms"] >= server_ms > 0


def test_open_loop_reports_send_lag(triton_server: Any, tmp_path: Path) -> None:
    code, doc = run(triton_server, tmp_path, "--mode", "open", "--rates", "20", "--budget-ms", "10000")
    step = doc["steps"][0]
    assert code == EXIT_MET
    assert step["sent"] == step["completed"] and step["send_lag"]["count"] == step["sent"]


def test_impossible_budget_exits_1(triton_server: Any, tmp_path: Path) -> None:
    code, doc = run(triton_server, tmp_path, "--concurrency", "1", "--budget-ms", "0.001")
    assert code == EXIT_BREACHED
    assert "0.001 ms" in doc["verdict"]["reasons"][0]


def test_unknown_model_exits_2(triton_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run(triton_server, tmp_path, "--model", "no_such_model", "--ready-timeout-s", "1")
    assert code == EXIT_COULD_NOT_RUN
    assert "model 'no_such_model' not ready" in capsys.readouterr().err


def test_http_and_token_ids(triton_server: Any, tmp_path: Path) -> None:
    code = main(
        [
            "--url",
            triton_server.http_url,
            "--protocol",
            "http",
            "--model",
            "bert",
            "--payload",
            "fixed",
            "--token-length",
            "16",
            "--concurrency",
            "1",
            "--budget-ms",
            "10000",
            "--output-dir",
            str(tmp_path),
            *SHORT,
        ]
    )
    doc = json.loads((tmp_path / "bert_closed.json").read_text())
    assert code == EXIT_MET and doc["steps"][0]["completed"] > 0 and doc["tokens"]["median"] == 16


def test_own_metrics_are_served(triton_server: Any, tmp_path: Path) -> None:
    """The tester's /metrics endpoint stays up only while it runs; scrape it right after a step."""
    scraped: list[str] = []
    port = free_port()

    from loadtest import runner

    original = runner.Runner.measure

    async def measure_and_scrape(self: runner.Runner, load: float) -> Any:
        step = await original(self, load)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            scraped.append(r.read().decode())
        return step

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner.Runner, "measure", measure_and_scrape)
        code = main(
            [
                "--url",
                triton_server.grpc_url,
                "--concurrency",
                "1",
                "--budget-ms",
                "10000",
                "--output-dir",
                str(tmp_path),
                *SHORT[:4],
                "--metrics-port",
                str(port),
                "--no-progress",
            ]
        )
    assert code == EXIT_MET and scraped
    assert 'loadtest_requests_total{mode="closed",model="embed",outcome="ok"}' in scraped[0]
    assert 'loadtest_request_duration_seconds_bucket{le="0.01",mode="closed",model="embed"}' in scraped[0]
