"""Server lifecycle against the real tritonserver: refusal, artifact verification, graceful drain."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from reliability.repository import linked_copy
from tests.integration.conftest import ROOT, http_status, sibling_model, start_server, stop_server, wait_ready

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

        async def load_then_stop() -> tuple[int, list]:
            client = grpcaio.InferenceServerClient(server.grpc_url)
            data = np.array([[b"drain me please " * 8]], dtype=np.object_)
            inp = grpcaio.InferInput("TEXT", [1, 1], "BYTES")
            inp.set_data_from_numpy(data)
            await client.infer("embed", [inp])  # the channel is connected before the burst
            # Just more than one batch (max batch 32: 24 calls could all share one and finish together), and small
            # enough to be answered inside the 1 s queue timeout (load shedding) on a busy 2-core runner (48 were not).
            calls = [asyncio.ensure_future(client.infer("embed", [inp])) for _ in range(36)]
            # One answer back means the burst, sent together on one connection, has reached the server.
            _, pending = await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
            server.process.send_signal(signal.SIGTERM)
            results = await asyncio.gather(*calls, return_exceptions=True)
            await client.close()
            return len(pending), results

        in_flight, results = asyncio.run(load_then_stop())
        assert in_flight > 0, "every request finished before SIGTERM: nothing was left to drain"
        failed = [
            r.message() if isinstance(r, InferenceServerException) else repr(r)
            for r in results
            if isinstance(r, Exception)
        ]
        assert not failed, failed
        assert server.process.wait(timeout=60) == 0
    finally:
        stop_server(server)
