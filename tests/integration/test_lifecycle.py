"""Server lifecycle against the real tritonserver: refusal, artifact verification, graceful drain."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reliability.copies import linked_copy
from tests.integration.conftest import (
    ROOT,
    http_status,
    sibling_model,
    signal_under_load,
    start_server,
    stop_server,
    wait_ready,
)

pytestmark = pytest.mark.integration


def test_refuses_to_start_without_an_exported_repository(tmp_path):
    for repo in (tmp_path / "missing", tmp_path):
        out = subprocess.run(
            [sys.executable, "-m", "serving", "--repository", str(repo)], cwd=ROOT, capture_output=True, text=True
        )
        assert out.returncode == 2
        assert "make export" in out.stderr


def test_tampered_artifact_is_not_loaded_and_server_is_not_ready(exported_repository, tmp_path):
    repo = linked_copy(exported_repository, tmp_path / "repo")
    manifest = json.loads((repo / "bert" / "manifest.json").read_text())
    artifact = repo / "bert" / manifest["artifacts"][manifest["runtime"]]["file"]
    sibling = sibling_model(repo)
    data = bytearray(artifact.read_bytes())
    data[len(data) // 2] ^= 0xFF
    artifact.unlink()
    artifact.write_bytes(bytes(data))
    server = start_server(repo, tmp_path / "server.log")
    try:
        deadline = time.monotonic() + 120
        base = f"http://{server.http_url}/v2"
        while time.monotonic() < deadline:
            if all(http_status(f"{base}/models/{m}/ready") == 200 for m in ("tokenizer", sibling)):
                break
            assert server.process.poll() is None, server.log()
            time.sleep(0.5)
        else:
            pytest.fail(f"tokenizer and {sibling} did not load:\n" + server.log())
        time.sleep(2)
        assert http_status(f"{base}/health/ready") != 200
        assert http_status(f"{base}/models/embed/ready") != 200
        assert http_status(f"{base}/models/bert/ready") != 200
        log = server.log()
        assert "not loading bert:" in log and artifact.name in log and "sha256" in log
    finally:
        stop_server(server)


def test_sigterm_drains_in_flight_requests_and_exits_0(exported_repository, tmp_path):
    server = start_server(linked_copy(exported_repository, tmp_path / "repo"), tmp_path / "server.log")
    try:
        wait_ready(server.http_url, server.process, 180)

        # Just more than one batch (max batch 32: 24 calls could all share one and finish together), and small
        # enough to be answered inside the 1 s queue timeout (load shedding) on a busy 2-core runner (48 were not).
        burst = signal_under_load(
            server, lambda: server.process.send_signal(signal.SIGTERM), b"drain me please " * 8, calls=36
        )
        assert burst.in_flight > 0, "every request finished before SIGTERM: nothing was left to drain"
        assert not burst.failed, burst.failed
        assert server.process.wait(timeout=60) == 0
    finally:
        stop_server(server)


def test_a_killed_tritonserver_leaves_no_unpacked_models_behind(exported_repository, tmp_path):
    """Each AOTInductor package unpacks its libraries into TMPDIR at load: the launcher gives tritonserver a
    directory of its own there and removes it when tritonserver exits, a SIGKILL included."""
    server = start_server(linked_copy(exported_repository, tmp_path / "repo"), tmp_path / "server.log")
    try:
        wait_ready(server.http_url, server.process, 180)
        pid = server.tritonserver_pid()
        environ = dict(
            entry.split(b"=", 1) for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in entry
        )
        scratch = Path(environ[b"TMPDIR"].decode())
        assert any(p.name.startswith("aotinductor_") for p in scratch.iterdir()), list(scratch.iterdir())
        os.kill(pid, signal.SIGKILL)
        assert server.process.wait(timeout=60) != 0
        assert not scratch.exists(), sorted(p.name for p in scratch.iterdir())
    finally:
        stop_server(server)
