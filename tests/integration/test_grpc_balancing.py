"""One long-lived gRPC client over real replicas behind one DNS name, as clients of the headless Service see them.

A small DNS server on loopback answers the name with the replicas' addresses (127.0.0.2, .3, then .4, all on one
gRPC port), as cluster DNS answers for `bertserve-grpc`. serving.client balances per call over what the name
resolves to; the servers' GOAWAY after --grpc-max-connection-age-s makes it resolve again, so a replica started
after the client connected gets calls.
"""

from __future__ import annotations

import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from serving.client import EmbedClient
from tests.integration.conftest import ROOT, free_port, wait_ready

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NAME = "bertserve-grpc.test"
AGE_S, GRACE_S = 3, 5


class LoopbackDNS(threading.Thread):
    """Answers A queries for NAME with ``addresses`` (TTL 0); every other query gets an empty NOERROR answer."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.addresses: list[str] = []

    def run(self) -> None:
        while True:
            try:
                query, peer = self.sock.recvfrom(512)
            except OSError:
                return
            self.sock.sendto(self.answer(query), peer)

    def answer(self, query: bytes) -> bytes:
        (qid, flags) = struct.unpack(">HH", query[:4])
        end, labels = 12, []
        while query[end]:
            labels.append(query[end + 1 : end + 1 + query[end]].decode().lower())
            end += 1 + query[end]
        qtype = struct.unpack(">H", query[end + 1 : end + 3])[0]
        question = query[12 : end + 5]
        found = ".".join(labels) == NAME and qtype == 1
        answers = self.addresses if found else []
        header = struct.pack(">HHHHHH", qid, 0x8180 | (flags & 0x0100), 1, len(answers), 0, 0)
        records = b"".join(b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 0, 4) + socket.inet_aton(a) for a in answers)
        return header + question + records

    def close(self) -> None:
        self.sock.close()


def _served(metrics_url: str) -> float:
    # tritonserver starts its metrics service a few ms after the HTTP service that reports ready
    for _ in range(50):
        try:
            text = urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=5).read().decode()
            break
        except urllib.error.URLError:
            time.sleep(0.1)
    else:
        raise AssertionError(f"no metrics at {metrics_url} after 5 s")
    m = re.search(r'^nv_inference_request_success\{model="embed",version="1"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def _counted(metrics_urls: list[str], before: list[float], calls: int, timeout_s: float = 5.0) -> list[float]:
    """Each replica's requests since ``before``, read until they add up to ``calls`` or the time is up: a request's
    success is counted as its statistics are reported, just after its response is sent."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = [_served(m) - b for m, b in zip(metrics_urls, before, strict=True)]
        if sum(got) >= calls or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def _start(repository: Path, host: str, grpc_port: int, log_path: Path) -> tuple[subprocess.Popen, str, str]:
    http, metrics = free_port(), free_port()
    cmd = [sys.executable, "-m", "serving", "--repository", str(repository), "--host", host,
           "--http-port", str(http), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics),
           "--grpc-max-connection-age-s", str(AGE_S), "--grpc-max-connection-age-grace-s", str(GRACE_S),
           "--gateway-port", "0"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    return proc, f"{host}:{http}", f"{host}:{metrics}"


def test_a_long_lived_client_spreads_calls_and_reaches_a_replica_started_after_it(exported_repository, tmp_path):
    dns = LoopbackDNS()
    dns.start()
    grpc_port = free_port()
    hosts = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    replicas = [_start(exported_repository, h, grpc_port, tmp_path / f"{h}.log") for h in hosts[:2]]
    try:
        for proc, http, _ in replicas:
            wait_ready(http, proc, 180)
        dns.addresses = hosts[:2]
        with EmbedClient(f"dns://127.0.0.1:{dns.port}/{NAME}:{grpc_port}", timeout_s=10) as client:
            first = [_served(m) for _, _, m in replicas]
            for i in range(40):
                client.embed([f"spread over the replicas {i}"])
            spread = _counted([m for _, _, m in replicas], first, 40)
            assert sum(spread) == 40 and min(spread) >= 10, f"calls per replica: {spread}"

            replicas.append(_start(exported_repository, hosts[2], grpc_port, tmp_path / f"{hosts[2]}.log"))
            proc, http, metrics = replicas[2]
            wait_ready(http, proc, 180)
            warm = _served(metrics)  # the model's warm-up requests count too
            dns.addresses = hosts
            start, calls = time.monotonic(), 0
            while _served(metrics) == warm:
                assert time.monotonic() - start < 6 * AGE_S + GRACE_S + 10, (
                    f"the replica started after the client got none of {calls} calls in "
                    f"{time.monotonic() - start:.0f} s"
                )
                client.embed([f"find the new replica {calls}"])
                calls += 1
                time.sleep(0.05)
            reached_s = time.monotonic() - start
            before = [_served(m) for _, _, m in replicas]
            for i in range(60):
                client.embed([f"spread over three {i}"])
            after = _counted([m for _, _, m in replicas], before, 60)
        assert min(after) >= 10, f"calls per replica once the new one is known: {after}"
        sys.stderr.write(f"new replica reached after {reached_s:.1f} s and {calls} calls; then {after}\n")
    except BaseException:
        for h in hosts:
            log = tmp_path / f"{h}.log"
            if log.exists():
                sys.stderr.write(f"----- {h} -----\n{log.read_text(errors='replace')[-3000:]}\n")
        raise
    finally:
        for proc, _, _ in replicas:
            proc.send_signal(signal.SIGTERM)
        for proc, _, _ in replicas:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        dns.close()
