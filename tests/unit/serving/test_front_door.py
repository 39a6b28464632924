"""The nginx configuration the replica launcher generates: keys, rate limit, body limit; `nginx -t` accepts it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from serving.launcher.replicas import FrontDoor, nginx_conf, nginx_rate, read_api_keys, replicas


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
    assert '"Bearer k-1" "alpha";' in conf
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


def test_fractional_rates_go_per_minute_and_zero_is_refused():
    assert nginx_rate(2) == "2r/s" and nginx_rate(2.5) == "150r/m" and nginx_rate(0.001) == "1r/m"
    with pytest.raises(ValueError, match="positive"):
        nginx_rate(0)
