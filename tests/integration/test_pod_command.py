"""The Kubernetes pod's server container, run here: its command, arguments and environment from the built
overlay, on the exported repository in place of the pod's /models volume and on free loopback ports.

It is the launcher `make serve` runs, so the pod gets the same verification, stub watchdog and ordered drain;
the image itself (NGC Triton with the project's environment) cannot be built on this machine (no Docker engine).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from deploy import validate
from tests.integration.conftest import ROOT, free_port, wait_ready

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed"),
]


def pod_server(overlay: str = "cpu") -> dict:
    resources = validate.kustomize_build(validate.K8S / "overlays" / overlay)
    deployment = next(r for r in resources if r["kind"] == "Deployment")
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "tritonserver")


def test_the_pod_command_serves_verifies_and_drains(exported_repository, tmp_path):
    server = pod_server()
    ports = {"8000": free_port(), "8001": free_port(), "8002": free_port(), "8080": free_port()}
    args = []
    for arg in server["args"]:
        name, _, value = arg.partition("=")
        value = {"/models": str(exported_repository), "0.0.0.0": "127.0.0.1"}.get(value, value)
        args.append(f"{name}={ports.get(value, value)}")
    command = [sys.executable if server["command"][0] == "python" else server["command"][0], *server["command"][1:]]
    env = {**os.environ, **{e["name"]: e["value"] for e in server["env"] if e["name"] not in ("HOME",)}}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    log_path = tmp_path / "pod.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen([*command, *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_ready(f"127.0.0.1:{ports['8000']}", proc, 180)
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{ports['8001']}")
        inp = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[b"the pod runs the launcher"]], dtype=np.object_))
        embedding = client.infer("embed", [inp], client_timeout=30).as_numpy("EMBEDDING")
        client.close()
        assert embedding.shape[0] == 1 and abs(float(np.linalg.norm(embedding)) - 1) < 1e-3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        text = log_path.read_text(errors="replace")
        assert "serve config:" in text  # the launcher, not bare tritonserver
        assert "grpc_max_connection_age_s=60" in text  # the pod's GOAWAY age reached tritonserver, which took it
        assert "draining in-flight requests" in text
    except BaseException:
        sys.stderr.write(log_path.read_text(errors="replace")[-6000:])
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
