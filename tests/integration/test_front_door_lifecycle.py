"""The real front door's lifecycle and its TLS: a signal during start-up and nginx dying stop every replica; keys
that differ in case are two clients; only public paths pass."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.conftest import ROOT, free_port, http_status

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _serving_children(pid: int) -> list[int]:
    """The replicas among ``pid``'s children; a child that exits between the listing and the read (the launcher's
    short-lived `nginx -t` check) is none of them."""
    found = []
    for child in _children(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_text()
        except OSError:
            continue
        if "serving" in cmdline:
            found.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _start(repository: Path, tmp: Path, n: int, *extra: str) -> tuple[subprocess.Popen, int, int]:
    http, grpc = free_port(), free_port()
    cmd = [sys.executable, "-m", "serving.launcher.replicas", "--replicas", str(n), "--repository", str(repository),
           "--http-port", str(http), "--grpc-port", str(grpc), "--base-port", str(free_port() + 1000), "--gateway-port", str(free_port()), *extra]  # fmt: skip
    log = (tmp / "replicas.log").open("w")
    env = {**os.environ, "TMPDIR": str(tmp)}  # where the launcher writes nginx.conf
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), http, grpc


def _stop(proc: subprocess.Popen, replicas: list[int]) -> None:
    for pid in [proc.pid, *replicas]:  # what a failing test leaves
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_signal_during_the_readiness_wait_stops_every_replica_and_removes_the_configuration(
    exported_repository, tmp_path
):
    proc, http, _ = _start(exported_repository, tmp_path, 2)
    replicas: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while len(replicas) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "replicas.log").read_text()
            replicas = _serving_children(proc.pid)
            time.sleep(0.05)
        assert list(tmp_path.glob("bertserve-nginx-*/nginx.conf"))
        assert http_status(f"http://127.0.0.1:{http}/v2/health/ready", timeout_s=1) == 0  # nginx not started yet
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        time.sleep(0.5)
        assert not [p for p in replicas if _alive(p)], (tmp_path / "replicas.log").read_text()[-3000:]
        assert not list(tmp_path.glob("bertserve-nginx-*")), "the key-bearing configuration was left behind"
    finally:
        _stop(proc, replicas)


def test_nginx_dying_stops_the_replicas_and_the_launcher_exits_non_zero(exported_repository, tmp_path):
    proc, http, _ = _start(exported_repository, tmp_path, 1)
    replicas: list[int] = []
    try:
        deadline = time.monotonic() + 180
        while http_status(f"http://127.0.0.1:{http}/v2/health/ready", timeout_s=1) != 200:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "replicas.log").read_text()
            time.sleep(0.5)
        replicas = _serving_children(proc.pid)
        (pid_file,) = tmp_path.glob("bertserve-nginx-*/nginx.pid")
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        assert proc.wait(timeout=30) == 1
        time.sleep(0.5)
        assert replicas and not [p for p in replicas if _alive(p)]
        assert not list(tmp_path.glob("bertserve-nginx-*"))
    finally:
        _stop(proc, replicas)


KEYS = {"upper": "Case-Key-0123456789", "lower": "case-key-0123456789"}


def _https_status(url: str, cert: Path, key: str | None) -> int:
    req = urllib.request.Request(url, headers={"authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ssl.create_default_context(cafile=str(cert))) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_tls_front_door_with_keys_that_differ_in_case_and_only_public_paths(exported_repository, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    keys = tmp_path / "keys.txt"
    keys.write_text("".join(f"{name} {k}\n" for name, k in KEYS.items()))
    proc, http, grpc = _start(exported_repository, tmp_path, 1, "--api-keys", str(keys), "--tls-cert", str(cert),
                              "--tls-key", str(key))  # fmt: skip
    base = f"https://127.0.0.1:{http}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if _https_status(f"{base}/v2/health/ready", cert, KEYS["upper"]) == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "replicas.log").read_text()
            time.sleep(0.5)
        assert _https_status(f"{base}/v2/health/ready", cert, KEYS["lower"]) == 200
        assert _https_status(f"{base}/v2/health/ready", cert, KEYS["upper"].upper()) == 401
        assert _https_status(f"{base}/v2/models/embed", cert, KEYS["lower"]) == 200
        for closed in ("/v2/models/embed/config", "/v2/models/embed/stats", "/v2/systemsharedmemory/status",
                       "/v2/repository/index", "/v2/models/stats"):  # fmt: skip
            assert _https_status(base + closed, cert, KEYS["lower"]) == 404, closed
        assert http_status(f"http://127.0.0.1:{http}/v2/health/ready", timeout_s=2) in (0, 400)  # no plain HTTP
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}", ssl=True, root_certificates=str(cert))
        inp = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[b"over TLS"]], dtype=np.object_))
        headers = {"authorization": f"Bearer {KEYS['upper']}"}
        assert client.infer("embed", [inp], headers=headers, client_timeout=30).as_numpy("EMBEDDING").shape[0] == 1
        with pytest.raises(Exception, match="Unimplemented|404"):
            client.get_model_config("embed", headers=headers, client_timeout=10)
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
