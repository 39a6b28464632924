"""The nginx configuration the replica launcher generates: keys, rate limit, body limit; `nginx -t` accepts it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from serving.launcher.replicas import FrontDoor, key_pattern, nginx_conf, nginx_rate, read_api_keys, replicas


def test_api_keys_file_is_parsed_with_comments(tmp_path):
    f = tmp_path / "keys"
    f.write_text("# clients\nalpha  key-a1  # team A\n\nbeta key-b2\n")
    assert read_api_keys(f) == {"key-a1": "alpha", "key-b2": "beta"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("alpha\n", "expected 'client-name key'"),
        ('alpha "quoted"\n', "expected 'client-name key'"),
        ("alpha k1\nbeta k1\n", "already used by 'alpha'"),
        ("# nothing\n", "no keys"),
    ],
)
def test_bad_api_keys_files_are_refused_with_the_line(tmp_path, text, message):
    f = tmp_path / "keys"
    f.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_api_keys(f)


def _conf(tmp_path, door: FrontDoor) -> str:
    return nginx_conf(replicas(2, 9100), "127.0.0.1", 9000, 9001, tmp_path, door)


def test_with_keys_only_known_bearers_get_a_name_and_a_rate(tmp_path):
    conf = _conf(tmp_path, FrontDoor({"k-1": "alpha"}, rate=5, burst=3, max_body="2m"))
    assert '"~^(?i:bearer) k-1$" "alpha";' in conf
    assert 'default "";' in conf and conf.count('if ($client = "") { return 401; }') == 3  # gRPC, HTTP, the gateway
    assert "rate=5r/s;" in conf and conf.count("burst=3 nodelay") == 3 and "client_max_body_size 2m;" in conf


def test_without_keys_callers_are_limited_by_address(tmp_path):
    conf = _conf(tmp_path, FrontDoor())
    assert 'default "$binary_remote_addr";' in conf and "Bearer" not in conf


NGINX = Path(shutil.which("nginx") or "/usr/sbin/nginx")


@pytest.mark.skipif(not NGINX.exists(), reason="nginx is not installed (`make tools` installs it)")
def test_nginx_accepts_the_generated_configuration(tmp_path):
    conf = tmp_path / "nginx.conf"
    conf.write_text(_conf(tmp_path, FrontDoor({"k-1": "alpha", "k-2": "beta"}, rate=2.5, burst=1)))
    done = subprocess.run(
        [str(NGINX), "-t", "-q", "-p", str(tmp_path), "-c", str(conf)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_a_key_matches_itself_alone_case_and_all():
    pattern = re.compile(key_pattern("Ab.c+d/e=").removeprefix("~"))
    assert pattern.match("Bearer Ab.c+d/e=") and pattern.match("bearer Ab.c+d/e=")  # the scheme is any case
    for other in ("Bearer ab.c+d/e=", "Bearer AbXc+d/e=", "Bearer Ab.cd/e=", "Bearer Ab.c+d/e=x", "Ab.c+d/e="):
        assert not pattern.match(other), other


def nginx_t(tmp_path: Path, conf_text: str) -> subprocess.CompletedProcess:
    conf = tmp_path / "nginx.conf"
    conf.write_text(conf_text)
    return subprocess.run(
        [str(NGINX), "-t", "-q", "-p", str(tmp_path), "-c", str(conf)], capture_output=True, text=True
    )


@pytest.mark.skipif(not NGINX.exists(), reason="nginx is not installed (`make tools` installs it)")
def test_keys_that_differ_only_in_case_are_two_keys(tmp_path):
    done = nginx_t(tmp_path, _conf(tmp_path, FrontDoor({"Key-1": "alpha", "key-1": "beta"})))
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(not NGINX.exists(), reason="nginx is not installed (`make tools` installs it)")
def test_tls_on_both_front_ports(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
    )  # fmt: skip
    conf = _conf(tmp_path, FrontDoor({"k-1": "alpha"}, tls=(cert, key)))
    assert "listen 127.0.0.1:9001 ssl http2;" in conf and "listen 127.0.0.1:9000 ssl;" in conf
    assert f"ssl_certificate {cert.resolve()};" in conf and f"ssl_certificate_key {key.resolve()};" in conf
    done = nginx_t(tmp_path, conf)
    assert done.returncode == 0, done.stderr
    with pytest.raises(ValueError, match="does not exist"):
        FrontDoor(tls=(cert, tmp_path / "missing.pem"))


def test_only_inference_health_and_metadata_paths_pass(tmp_path):
    conf = _conf(tmp_path, FrontDoor())
    patterns = [re.compile(p.removeprefix("~")) for p in re.findall(r'^\s+"(~[^"]+)" 1;$', conf, re.M)]
    public = [
        "/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/embed", "/v2/models/embed/ready",
        "/v2/models/embed/infer", "/v2/models/bert_fp32/versions/1/infer", "/v2/models/embed/versions/1",
        "/inference.GRPCInferenceService/ModelInfer", "/inference.GRPCInferenceService/ServerReady",
        "/inference.GRPCInferenceService/ModelMetadata",
    ]  # fmt: skip
    closed = [
        "/v2/models/embed/config", "/v2/models/embed/stats", "/v2/models/stats", "/v2/systemsharedmemory/status",
        "/v2/systemsharedmemory/region/r/register", "/v2/cudasharedmemory/status", "/v2/repository/index",
        "/v2/repository/models/embed/load", "/v2/trace/setting", "/v2/logging", "/v2/models/embed/generate",
        "/v2/models/../repository/index", "/v2/models/embed/infer?x=1", "/v2/models/embed%2Fconfig", "/metrics",
        "/inference.GRPCInferenceService/ModelConfig", "/inference.GRPCInferenceService/ModelStatistics",
        "/inference.GRPCInferenceService/SystemSharedMemoryRegister", "/inference.GRPCInferenceService/RepositoryIndex",
        "/inference.GRPCInferenceService/RepositoryModelLoad", "/inference.GRPCInferenceService/LogSettings",
        "/inference.GRPCInferenceService/TraceSetting", "/inference.GRPCInferenceService/CudaSharedMemoryStatus",
    ]  # fmt: skip
    for path in public:
        assert any(p.match(path) for p in patterns), path
    for path in closed:
        assert not any(p.match(path) for p in patterns), path
    assert conf.count("if ($public_path = 0) { return 404; }") == 2


def test_fractional_rates_go_per_minute_and_zero_is_refused():
    assert nginx_rate(2) == "2r/s" and nginx_rate(2.5) == "150r/m" and nginx_rate(0.001) == "1r/m"
    with pytest.raises(ValueError, match="positive"):
        nginx_rate(0)
