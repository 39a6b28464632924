"""The shipped Prometheus config, rules and Grafana dashboard against the real server and a real Prometheus.

Prometheus (Debian `prometheus`) scrapes the session's tritonserver with the shipped scrape config, retargeted
at the fixture's metrics port, while a short gRPC load runs through `embed`. Then every metric the dashboard names
must exist in a real scrape (or be a recording rule), every panel query and every recording rule must return data.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

from deploy import validate

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("prometheus") is None, reason="prometheus not installed (Debian; deploy/ci-tools.sh)"
    ),
]

SCRAPE_INTERVAL = "1s"
LOAD_REQUESTS = 200
PANELS = validate.dashboard_queries()


def prometheus_config_for(metrics_url: str, rules_dir: Path = validate.RULE_FILES[0].parent) -> dict:
    """The shipped scrape config with the Triton job pointed at metrics_url, fast scrapes and evaluations,
    absolute rule paths, and only the server's job (the load tester does not run here)."""
    config = yaml.safe_load(validate.PROMETHEUS_CONFIG.read_text())
    config["global"] = {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL}
    config["rule_files"] = [str(rules_dir / "*.yml")]
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == "bertserve"]
    job["static_configs"] = [{"targets": [metrics_url]}]
    config["scrape_configs"] = [job]
    return config


def http_get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def query(prometheus_url: str, promql: str) -> list[dict]:
    url = f"{prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    body = json.loads(http_get(url))
    assert body["status"] == "success", body
    return body["data"]["result"]


def scraped_names(metrics_url: str) -> set[str]:
    text = http_get(f"http://{metrics_url}/metrics").decode()
    return {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines() if line and line[0] != "#"}


@pytest.fixture(scope="module")
def prometheus(triton_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.integration.conftest import free_port

    work = tmp_path_factory.mktemp("prometheus")
    config = work / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config_for(triton_server.metrics_url)))
    address = f"127.0.0.1:{free_port()}"
    log = (work / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address={address}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://{address}"
    try:
        deadline = time.monotonic() + 30
        while not query_up(url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not scrape the server:\n{(work / 'prometheus.log').read_text()}")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def query_up(url: str) -> bool:
    try:
        return any(sample["value"][1] == "1" for sample in query(url, 'up{job="bertserve"}'))
    except OSError:
        return False


@pytest.fixture(scope="module")
def loaded(prometheus: str, triton_server) -> str:
    """Prometheus after a short load through `embed` (and one bad request, so failure series exist)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    words = "the quick brown fox jumps over the lazy dog while prometheus scrapes every second".split()
    for i in range(LOAD_REQUESTS):
        text = " ".join(words[: 3 + i % (len(words) - 3)])
        inputs = [grpcclient.InferInput("TEXT", [1, 1], "BYTES")]
        inputs[0].set_data_from_numpy(np.array([[text.encode()]], dtype=np.object_))
        client.infer("embed", inputs)
    bad = [grpcclient.InferInput("TEXT", [1, 1], "BYTES")]
    bad[0].set_data_from_numpy(np.array([[b""]], dtype=np.object_))
    with pytest.raises(InferenceServerException):
        client.infer("embed", bad)
    client.close()
    # Two more scrapes and rule evaluations after the last request.
    deadline = time.monotonic() + 30
    while not query(prometheus, "model:bertserve_request_duration_seconds:p99_5m > 0"):
        assert time.monotonic() < deadline, "recording rules never saw the load"
        time.sleep(1)
    time.sleep(3)
    return prometheus


@pytest.fixture(scope="module")
def names(triton_server) -> set[str]:
    return scraped_names(triton_server.metrics_url)


def test_known_metrics_exist_in_a_real_scrape(loaded, names):
    expected = {name for name in validate.KNOWN_METRICS if not name.startswith("loadtest_")} - {"up"}
    if not names & validate.GPU_METRICS:
        expected -= validate.GPU_METRICS
    assert expected - names == set()


def test_dashboard_names_only_scraped_metrics_and_recording_rules(loaded, names):
    missing = validate.dashboard_metric_names() - names - validate.recording_rule_names() - {"up"}
    if not names & validate.GPU_METRICS:  # the server sees no GPU: only the GPU panels' metrics may be absent
        missing -= validate.GPU_METRICS
    assert missing == set()


@pytest.mark.parametrize(("title", "expr"), PANELS, ids=[f"{t}: {e[:60]}" for t, e in PANELS])
def test_every_panel_query_returns_data(loaded, names, title, expr):
    if validate.metric_names(expr) <= validate.GPU_METRICS and not names & validate.GPU_METRICS:
        pytest.skip(f"{title}: the server exports no GPU metrics on this machine")
    assert query(loaded, expr), f"panel {title!r}: empty result for {expr}"


@pytest.mark.parametrize("record", sorted(validate.recording_rule_names()))
def test_recording_rules_return_values(loaded, record):
    assert query(loaded, record), f"{record} returned nothing"
