"""The integration tier: the default model exported once, the real tritonserver started from a fixture.

The repository is exported into build/test-repository (again when the export or serving code changed;
tests/integration/repositories.py); the server runs on free ports; its log is printed when a test of the session
failed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from reliability import processes
from reliability.processes import ServerProcess, http_status
from serving.contract import native
from tests.integration import repositories

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 180
# Serve only the native encoder models (no tokenizer stub, no embed): `make backend-asan` sets it, because the
# Python-backend stub, which inherits the sanitizer's preload from tritonserver, crashes under it.
NATIVE_ONLY = os.environ.get("BERTSERVE_TEST_NATIVE_ONLY", "") == "1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The one server harness, shared with the reliability runs and the benchmarks.
TritonServer = ServerProcess


def exported(repo: repositories.RepositoryExport) -> Path:
    """``repo``, exported first when it is stale; a failed export fails the test with the end of its log (the gate
    or step that failed), which a CI log would otherwise lack."""
    try:
        return repo.exported()
    except repositories.ExportFailed as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def exported_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real default model (MiniLM, CPU, fp32 + int8) exported end to end, once per code version.

    BERTSERVE_TEST_REPOSITORY names an already exported repository to use as it is instead."""
    given = os.environ.get("BERTSERVE_TEST_REPOSITORY")
    repo = Path(given).resolve() if given else exported(repositories.DEFAULT)
    return native_only_copy(repo, tmp_path_factory.mktemp("native-only")) if NATIVE_ONLY else repo


def native_only_copy(repo: Path, work: Path) -> Path:
    """A linked copy of ``repo`` whose index lists only the models of the native backend."""
    from reliability.copies import linked_copy, replace_file

    copy = linked_copy(repo, work / "repo")
    index = json.loads((copy / "repository.json").read_text())
    index["models"] = {m: spec for m, spec in index["models"].items() if spec["backend"] == native.NAME}
    index["ensemble_requires"] = {}
    replace_file(copy / "repository.json", json.dumps(index).encode())
    return copy


def sibling_model(repository: Path) -> str:
    """The precision exported beside ``bert`` (bert_fp32 or bert_int8: export serves whichever measured faster)."""
    models = json.loads((repository / "repository.json").read_text())["models"]
    return next(m for m, spec in models.items() if m.startswith("bert_") and spec["backend"] != "pytorch")


def text_model(repository: Path) -> str:
    """The model that checks and tokenizes embed's texts: embed itself when native, else the Python tokenizer."""
    models = json.loads((repository / "repository.json").read_text())["models"]
    return "embed" if models["embed"]["backend"] == native.NAME else "tokenizer"


@pytest.fixture(scope="session")
def tokenizing_model(exported_repository: Path) -> str:
    return text_model(exported_repository)


@pytest.fixture(scope="session")
def side_model(exported_repository: Path) -> str:
    return sibling_model(exported_repository)


def served_counts(metrics_url: str, model: str, expected: tuple[int, int] | None = None) -> tuple[int, int]:
    """The model's nv_inference_request_success and bertserve_request_duration_seconds_count; with ``expected``,
    read again for up to 5 s until they are that (statistics are reported just after the response is sent)."""
    deadline = time.monotonic() + 5
    while True:
        text = urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=5).read().decode()
        counts = []
        for family in ("nv_inference_request_success", "bertserve_request_duration_seconds_count"):
            found = re.search(rf'^{family}\{{[^}}]*model="{model}"[^}}]*\}} (\S+)$', text, re.M)
            assert found, f"no {family} for {model}"
            counts.append(int(float(found[1])))
        if expected is None or tuple(counts) == expected or time.monotonic() > deadline:
            return tuple(counts)
        time.sleep(0.05)


def wait_ready(http_url: str, process: subprocess.Popen, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if process.poll() is not None:
            raise RuntimeError(f"tritonserver exited with {process.returncode} before it was ready")
        if http_status(f"http://{http_url}/v2/health/ready", timeout_s=1) == 200:
            return time.monotonic() - start
        time.sleep(0.25)
    raise TimeoutError(f"tritonserver not ready after {timeout_s} s")


@dataclass(frozen=True)
class SignalUnderLoad:
    in_flight: int  # requests not yet answered when the signal went
    failed: list[str]  # what the failed ones said
    signalled: float  # time.monotonic() at the signal


def signal_under_load(server: TritonServer, send: Callable[[], None], text: bytes, calls: int) -> SignalUnderLoad:
    """Send ``calls`` embed requests together on one connected channel, ``send`` the signal once the first answer is
    back (so the burst has reached the server), then wait for every answer."""

    async def run() -> SignalUnderLoad:
        client = grpcaio.InferenceServerClient(server.grpc_url)
        inp = grpcaio.InferInput("TEXT", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[text]], dtype=np.object_))
        await client.infer("embed", [inp])  # the channel is connected before the burst
        burst = [asyncio.ensure_future(client.infer("embed", [inp])) for _ in range(calls)]
        _, pending = await asyncio.wait(burst, return_when=asyncio.FIRST_COMPLETED)
        send()
        signalled = time.monotonic()
        results = await asyncio.gather(*burst, return_exceptions=True)
        await client.close()
        failed = [
            r.message() if isinstance(r, InferenceServerException) else repr(r)
            for r in results
            if isinstance(r, Exception)
        ]
        return SignalUnderLoad(len(pending), failed, signalled)

    return asyncio.run(run())


def start_server(repository: Path, log_path: Path, *extra: str) -> TritonServer:
    return processes.start(repository, log_path, *extra)


def stop_server(server: TritonServer, timeout_s: float = 60) -> int:
    """SIGTERM (drain), then SIGKILL of what is left, stubs and their shared memory included."""
    return processes.stop(server, timeout_s)


@pytest.fixture(scope="session")
def triton_server(
    exported_repository: Path, tmp_path_factory: pytest.TempPathFactory, request
) -> Iterator[TritonServer]:
    log_path = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    server = start_server(exported_repository, log_path)
    try:
        server.wait_ready(READY_TIMEOUT_S)  # its metrics answering too: tests read them first thing
    except Exception:
        stop_server(server)
        sys.stderr.write(f"\n----- tritonserver log -----\n{server.log()}\n")
        raise
    yield server
    stop_server(server)
    if request.session.testsfailed:
        sys.stderr.write(f"\n----- tritonserver log ({log_path}) -----\n{server.log()[-20000:]}\n")


def _orphans_and_unused_regions() -> tuple[set[int], set[str]]:
    """Backend stubs whose tritonserver is gone, and stub regions no live process maps (a test session beside this one
    has its own live stubs and mapped regions, which are not counted)."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    orphans, mapped = set(), set()
    for pid in pids:
        if processes.argv(pid)[0].endswith(processes.STUB):
            try:
                parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if Path(processes.argv(parent)[0]).name != "tritonserver":
                orphans.add(pid)
        try:
            mapped.update(
                line.rsplit("/", 1)[-1]
                for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
                if "/dev/shm/" in line
            )
        except OSError:
            continue
    regions = {p.name for p in Path("/dev/shm").glob("triton_python_backend_shm_region_*")}
    return orphans, regions - mapped


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind() -> Iterator[None]:
    """The tier cleans up what it starts: no backend stub outlives its server and no stub's shared-memory region is
    left unused, whichever way a test ended its server (drained, signalled, killed)."""
    orphans, regions = _orphans_and_unused_regions()
    yield
    time.sleep(1)  # a stub told to exit by its server's end
    left_orphans, left_regions = (
        now - before for now, before in zip(_orphans_and_unused_regions(), (orphans, regions), strict=True)
    )
    assert not left_orphans and not left_regions, (
        f"left behind: stubs {sorted(left_orphans)}, regions {sorted(left_regions)}"
    )
