"""Security of the real tritonserver: the model-repository API needs the admin key; gRPC over TLS."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from reliability import processes
from reliability.copies import linked_copy
from serving.launcher.config import GRPC_HEADER_PREFIX, ServeConfig

pytestmark = pytest.mark.integration

HEADER = ServeConfig.admin_header  # HTTP sends it as is
GRPC_HEADER = GRPC_HEADER_PREFIX + HEADER  # gRPC metadata carries Triton's prefix
KEY = "test-admin-key-0123456789"


@pytest.fixture(scope="module")
def keyed_server(exported_repository, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("keyed")
    repo = linked_copy(exported_repository, tmp / "repo")
    with processes.running(repo, tmp / "server.log", "--admin-key", KEY) as server:
        yield server


def _http(method: str, url: str, headers: dict[str, str] | None = None) -> int:
    req = urllib.request.Request(url, data=b"{}" if method == "POST" else None, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _embed(client: grpcclient.InferenceServerClient) -> np.ndarray:
    inp = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[b"hello secure world"]], dtype=np.object_))
    return client.infer("embed", [inp], client_timeout=30).as_numpy("EMBEDDING")


def test_grpc_unload_needs_the_admin_key(keyed_server, side_model):
    # side_model is loaded but outside the ensemble: unloading it breaks nothing else
    client = grpcclient.InferenceServerClient(keyed_server.grpc_url)
    for headers in (None, {GRPC_HEADER: "wrong-key"}, {HEADER: KEY}):
        with pytest.raises(InferenceServerException) as e:
            client.unload_model(side_model, headers=headers)
        assert "UNAVAILABLE" in str(e.value.status()) and "restricted" in e.value.message().lower()
        with pytest.raises(InferenceServerException):
            client.get_model_repository_index(headers=headers)
    assert client.is_model_ready(side_model)
    assert _embed(client).shape == (1, 384)  # inference needs no key

    client.unload_model(side_model, headers={GRPC_HEADER: KEY})
    assert not client.is_model_ready(side_model)
    client.load_model(side_model, headers={GRPC_HEADER: KEY})
    assert client.is_model_ready(side_model)
    client.close()


def test_http_unload_needs_the_admin_key(keyed_server, side_model):
    url = f"http://{keyed_server.http_url}/v2/repository/models/{side_model}/unload"
    assert _http("POST", url) == 403
    assert _http("POST", url, {HEADER: "wrong-key"}) == 403
    assert _http("GET", f"http://{keyed_server.http_url}/v2/models/{side_model}/ready") == 200
    assert _http("POST", f"http://{keyed_server.http_url}/v2/logging", {"Content-Type": "application/json"}) == 403

    assert _http("POST", url, {HEADER: KEY}) == 200
    assert _http("GET", f"http://{keyed_server.http_url}/v2/models/{side_model}/ready") != 200
    load = f"http://{keyed_server.http_url}/v2/repository/models/{side_model}/load"
    assert _http("POST", load, {HEADER: KEY}) == 200
    assert _http("GET", f"http://{keyed_server.http_url}/v2/models/{side_model}/ready") == 200


def _bad_output_failures(server) -> float:
    text = urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=5).read().decode()
    line = 'bertserve_failures_total{model="embed",reason="bad_output"} '
    return sum(float(row[len(line) :]) for row in text.splitlines() if row.startswith(line))


def test_a_too_small_output_region_is_the_clients_error(keyed_server):
    """An output shared-memory region smaller than the embedding: INVALID_ARGUMENT, counted as the client's fault
    (bad_output), not INTERNAL."""
    from tritonclient.utils import shared_memory as shm

    client = grpcclient.InferenceServerClient(keyed_server.grpc_url)
    region = shm.create_shared_memory_region("bertserve_small_out", "/bertserve_small_out", 16)
    try:
        client.register_system_shared_memory("small_out", "/bertserve_small_out", 16, headers={GRPC_HEADER: KEY})
        inp = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[b"into a small region"]], dtype=np.object_))
        out = grpcclient.InferRequestedOutput("EMBEDDING")
        out.set_shared_memory("small_out", 16)
        before = _bad_output_failures(keyed_server)
        with pytest.raises(InferenceServerException) as e:
            client.infer("embed", [inp], outputs=[out], client_timeout=30)
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT", (e.value.status(), e.value.message())
        assert "should be at least 1536 bytes" in e.value.message()
        deadline = time.monotonic() + 10
        while _bad_output_failures(keyed_server) != before + 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _bad_output_failures(keyed_server) == before + 1
        assert _embed(client).shape == (1, 384)
    finally:
        client.unregister_system_shared_memory(headers={GRPC_HEADER: KEY})
        shm.destroy_shared_memory_region(region)
        client.close()


def test_admin_key_is_not_logged(keyed_server):
    assert KEY not in keyed_server.log()
    assert "admin key configured" in keyed_server.log()


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory) -> dict[str, Path]:
    """A throw-away CA, a server certificate for 127.0.0.1 / localhost and a client certificate, all signed by it."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("certs")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=bertserve test CA",
             "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))  # fmt: skip
    for name, ext in (
        ("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"),
        ("client", "extendedKeyUsage=clientAuth"),
    ):
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"))  # fmt: skip
        _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
                 "-CAcreateserial", "-days", "1", "-extfile", str(d / f"{name}.ext"), "-out", str(d / f"{name}.crt"))  # fmt: skip
    return {p.stem + p.suffix.replace(".", "_"): p for p in d.iterdir()}


def test_grpc_tls_serves_encrypted_and_refuses_plaintext(exported_repository, tmp_path, certificates):
    c = certificates
    repo = linked_copy(exported_repository, tmp_path / "repo")
    tls = [
        "--grpc-use-ssl",
        "--grpc-server-cert",
        str(c["server_crt"]),
        "--grpc-server-key",
        str(c["server_key"]),
    ]
    with processes.running(repo, tmp_path / "server.log", *tls) as server:
        secure = grpcclient.InferenceServerClient(server.grpc_url, ssl=True, root_certificates=str(c["ca_crt"]))
        assert secure.is_server_ready()
        assert _embed(secure).shape == (1, 384)
        secure.close()
        plain = grpcclient.InferenceServerClient(server.grpc_url)
        with pytest.raises(InferenceServerException):
            _embed(plain)
        plain.close()
        untrusted = grpcclient.InferenceServerClient(server.grpc_url, ssl=True)  # system roots: not our CA
        with pytest.raises(InferenceServerException):
            untrusted.is_server_ready()
        untrusted.close()


def test_grpc_mutual_tls_needs_a_client_certificate(exported_repository, tmp_path, certificates):
    c = certificates
    repo = linked_copy(exported_repository, tmp_path / "repo")
    mtls = ["--grpc-ssl-mutual", "--grpc-server-cert", str(c["server_crt"]),
            "--grpc-server-key", str(c["server_key"]), "--grpc-root-cert", str(c["ca_crt"])]  # fmt: skip
    with processes.running(repo, tmp_path / "server.log", *mtls) as server:
        anonymous = grpcclient.InferenceServerClient(server.grpc_url, ssl=True, root_certificates=str(c["ca_crt"]))
        with pytest.raises(InferenceServerException):
            _embed(anonymous)
        anonymous.close()
        known = grpcclient.InferenceServerClient(
            server.grpc_url,
            ssl=True,
            root_certificates=str(c["ca_crt"]),
            private_key=str(c["client_key"]),
            certificate_chain=str(c["client_crt"]),
        )
        assert _embed(known).shape == (1, 384)
        known.close()
