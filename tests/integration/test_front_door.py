"""The real nginx in front of a real replica: API keys, a per-client rate limit and a body limit."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.conftest import ROOT, free_port, http_status

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEYS = {"alpha": "alpha-key-0123456789", "beta": "beta-key-9876543210"}
RATE, BURST = 2, 4  # per client: a burst of 4, then 2 per second


def _bearer(client: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[client]}"}


@pytest.fixture(scope="module")
def front_door(exported_repository, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("front")
    keys = tmp / "keys.txt"
    keys.write_text("".join(f"{name} {key}\n" for name, key in KEYS.items()))
    http, grpc = free_port(), free_port()
    cmd = [sys.executable, "-m", "serving.launcher.replicas", "--replicas", "1", "--repository", str(exported_repository),
           "--http-port", str(http), "--grpc-port", str(grpc), "--base-port", str(free_port() + 1000),
           "--api-keys", str(keys), "--rate", str(RATE), "--burst", str(BURST),
           "--gateway-port", str(free_port())]  # fmt: skip
    log = (tmp / "replicas.log").open("w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    ready = f"http://127.0.0.1:{http}/v2/health/ready"
    deadline = time.monotonic() + 180
    while http_status(ready, _bearer("beta")) != 200:
        assert proc.poll() is None and time.monotonic() < deadline, (tmp / "replicas.log").read_text()[-3000:]
        time.sleep(0.5)
    time.sleep(1 / RATE * BURST)  # the readiness polls spent beta's burst: let it refill
    yield f"127.0.0.1:{http}", f"127.0.0.1:{grpc}"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    log.close()


def _text_input() -> list:
    inp = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[b"through the front door"]], dtype=np.object_))
    return [inp]


def _grpc_status(grpc_url: str, headers: dict[str, str] | None) -> str:
    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        client.infer("embed", _text_input(), headers=headers, client_timeout=30)
        return "OK"
    except InferenceServerException as e:
        return str(e.status())
    finally:
        client.close()


def test_calls_without_a_known_key_are_refused(front_door):
    http, grpc = front_door
    assert http_status(f"http://{http}/v2/health/ready", {}) == 401
    assert http_status(f"http://{http}/v2/health/ready", {"authorization": "Bearer not-a-key"}) == 401
    assert _grpc_status(grpc, None) == "StatusCode.UNAUTHENTICATED"
    assert _grpc_status(grpc, {"authorization": "Bearer not-a-key"}) == "StatusCode.UNAUTHENTICATED"
    assert _grpc_status(grpc, _bearer("alpha")) == "OK"


def test_one_client_over_its_rate_is_limited_and_another_is_not(front_door):
    http, grpc = front_door
    statuses = [_grpc_status(grpc, _bearer("alpha")) for _ in range(3 * BURST)]
    assert statuses[0] == "OK"
    assert statuses.count("StatusCode.UNAVAILABLE") >= BURST, statuses  # HTTP 429 reaches gRPC as UNAVAILABLE
    assert set(statuses) <= {"OK", "StatusCode.UNAVAILABLE"}, statuses
    assert http_status(f"http://{http}/v2/health/ready", _bearer("alpha")) == 429
    assert _grpc_status(grpc, _bearer("beta")) == "OK"  # beta's budget is its own
    time.sleep(1 / RATE * BURST)
    assert _grpc_status(grpc, _bearer("alpha")) == "OK"  # and alpha's refills


def test_a_body_over_the_limit_is_refused_before_the_servers(front_door):
    http, _ = front_door
    time.sleep(1 / RATE * BURST)
    text = "x" * (5 << 20)
    body = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [text]}]}).encode()
    assert http_status(f"http://{http}/v2/models/embed/infer", _bearer("beta"), body) == 413
    assert _grpc_status(front_door[1], _bearer("beta")) == "OK"
