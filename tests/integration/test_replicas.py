"""N real tritonservers behind a real nginx: every replica takes gRPC traffic; losing one is survived."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio

from tests.integration.conftest import ROOT, free_port, wait_ready

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _successes(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    m = re.search(r'^nv_inference_request_success\{model="embed",version="1"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


async def _drive(url: str, n: int, concurrency: int) -> tuple[int, list[Exception]]:
    client = grpcaio.InferenceServerClient(url)
    inp = grpcaio.InferInput("TEXT", [1, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[b"replicated request"]], dtype=np.object_))
    ok, errors = 0, []
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        nonlocal ok
        async with sem:
            try:
                await client.infer("embed", [inp], client_timeout=10)
                ok += 1
            except Exception as e:
                errors.append(e)

    await asyncio.gather(*[one() for _ in range(n)])
    await client.close()
    return ok, errors


def test_two_replicas_share_traffic_and_survive_losing_one(exported_repository, tmp_path):
    http, grpc, base = free_port(), free_port(), 20000 + (os.getpid() % 2000) * 10
    log = (tmp_path / "replicas.log").open("w")
    cmd = [
        sys.executable, "-m", "serving.launcher.replicas", "--replicas", "2", "--repository", str(exported_repository),
        "--http-port", str(http), "--grpc-port", str(grpc), "--base-port", str(base),
        "--gateway-port", str(free_port()),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(f"127.0.0.1:{base}", proc, 240)
        wait_ready(f"127.0.0.1:{base + 10}", proc, 240)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # nginx starts once both replicas are ready
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=1)
                break
            except OSError:
                time.sleep(0.3)
        warm = [_successes(base + 2), _successes(base + 12)]  # the model's warm-up requests count too
        ok, errors = asyncio.run(_drive(f"127.0.0.1:{grpc}", 60, 4))
        assert (ok, [str(e) for e in errors]) == (60, [])
        per_replica = [_successes(base + 2) - warm[0], _successes(base + 12) - warm[1]]
        assert all(s > 0 for s in per_replica), f"a replica took no traffic: {per_replica}"
        assert sum(per_replica) == 60

        launchers = [p for p in _children(proc.pid) if "serving" in open(f"/proc/{p}/cmdline").read()]
        if len(os.sched_getaffinity(0)) >= 2:  # a CPU repository: each replica on CPUs of its own
            shares = [os.sched_getaffinity(p) for p in launchers]
            assert len(shares) == 2 and not shares[0] & shares[1], f"the replicas share CPUs: {shares}"
        victim = launchers[0]
        servers = _children(victim)

        async def lose_one() -> tuple[int, list[Exception]]:
            task = asyncio.ensure_future(_drive(f"127.0.0.1:{grpc}", 120, 4))
            await asyncio.sleep(0.3)
            for pid in servers:
                os.kill(pid, signal.SIGKILL)
            return await task

        ok, errors = asyncio.run(lose_one())
        assert ok + len(errors) == 120
        assert len(errors) <= 8, (
            f"{len(errors)} failures after losing one replica: {Counter(str(e) for e in errors).most_common()}"
        )
        ok, errors = asyncio.run(_drive(f"127.0.0.1:{grpc}", 30, 2))
        assert (ok, [str(e) for e in errors]) == (30, []), "the surviving replica did not take over"
    except BaseException:
        sys.stderr.write((tmp_path / "replicas.log").read_text()[-10000:])
        raise
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
