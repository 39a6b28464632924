"""Faults injected into the native backend inside the real tritonserver (backend/src/fault.h): an exception at each
error path reaches its client as INTERNAL with what failed, the requests beside it are still served, the server
stays ready, and it still drains and exits 0 on SIGTERM.

Injection is on only where the server's environment sets BERTSERVE_FAULT_INJECTION=1; a text request whose first
TEXT element is ``bertserve-fault:<point>`` then throws at <point>.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from reliability import processes
from tests.integration.conftest import http_status, native_only_copy

pytestmark = pytest.mark.integration

# Each point: where it throws, and what the client is told.
POINTS = {
    "execute": "injected fault at execute",  # execute's loop, the request already read
    "respond": "responding failed: injected fault at respond",  # between creating the response and sending it
    "serve": "injected fault at serve",  # the compute pool's batch task, before the batch's own try
}


@pytest.fixture(scope="module")
def faulty_server(exported_repository, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    repo = native_only_copy(exported_repository, tmp)
    server = processes.start(repo, tmp / "server.log", env={"BERTSERVE_FAULT_INJECTION": "1"})
    try:
        server.wait_ready(180)
        yield server
    finally:
        code = processes.stop(server)
        assert code == 0, f"the server did not drain and exit 0 after the faults (exit {code}):\n{server.log()[-5000:]}"


def _text(texts: list[bytes]) -> list:
    inp = grpcaio.InferInput("TEXT", [len(texts), 1], "BYTES")
    inp.set_data_from_numpy(np.array([[t] for t in texts], dtype=np.object_))
    return [inp]


async def _calls(url: str, bodies: list[list[bytes]]) -> list[str]:
    """Sends the requests at once; "ok" or each failure's status and message."""
    client = grpcaio.InferenceServerClient(url)

    async def one(texts: list[bytes]) -> str:
        try:
            result = await client.infer("embed", _text(texts), client_timeout=30)
        except InferenceServerException as e:
            return f"{e.status()}: {e.message()}"
        return "ok" if result.as_numpy("EMBEDDING").shape == (len(texts), 384) else "wrong shape"

    try:
        return await asyncio.gather(*(one(b) for b in bodies))
    finally:
        await client.close()


@pytest.mark.parametrize("point", list(POINTS))
def test_an_injected_fault_answers_its_client_and_the_server_stays_up(faulty_server, point):
    fault = f"bertserve-fault:{point}".encode()
    got = asyncio.run(_calls(faulty_server.grpc_url, [[fault]] + [[b"a plain request"]] * 3))
    assert got[0].startswith("StatusCode.INTERNAL: ") and POINTS[point] in got[0], got[0]
    if point != "serve":  # a failed batch task fails the batch it held; the others fail alone
        assert got[1:] == ["ok"] * 3, got
    assert http_status(f"http://{faulty_server.http_url}/v2/health/ready") == 200
    assert asyncio.run(_calls(faulty_server.grpc_url, [[b"served after the fault"]] * 4)) == ["ok"] * 4


def test_a_fault_request_is_plain_text_where_injection_is_off(triton_server):
    """Without BERTSERVE_FAULT_INJECTION the marker is a text like any other."""
    got = asyncio.run(_calls(triton_server.grpc_url, [[f"bertserve-fault:{p}".encode()] for p in POINTS]))
    assert got == ["ok"] * len(POINTS), got
