"""Ctrl-C in the terminal that runs `make serve`: the terminal sends SIGINT to the whole foreground process group.

tritonserver runs in a process group of its own, so the signal reaches the launcher alone; the launcher drains
(the `embed` ensemble first, then the models) and only then stops tritonserver. Before, tritonserver got the
SIGINT too, closed its ports at once, and the launcher's drain failed with "Connection refused".
"""

from __future__ import annotations

import asyncio
import os
import signal

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from reliability.repository import linked_copy
from tests.integration.conftest import start_server, stop_server, wait_ready

pytestmark = pytest.mark.integration


def test_ctrl_c_to_the_process_group_answers_every_request_in_flight(exported_repository, tmp_path):
    server = start_server(linked_copy(exported_repository, tmp_path / "repo"), tmp_path / "server.log")
    try:
        wait_ready(server.http_url, server.process, 180)

        async def load_then_ctrl_c() -> tuple[int, list]:
            client = grpcaio.InferenceServerClient(server.grpc_url)
            inp = grpcaio.InferInput("TEXT", [1, 1], "BYTES")
            inp.set_data_from_numpy(np.array([[b"a request in flight when the user presses Ctrl-C " * 3]], np.object_))
            await client.infer("embed", [inp])
            calls = [asyncio.ensure_future(client.infer("embed", [inp])) for _ in range(24)]
            _, pending = await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
            os.killpg(server.process.pid, signal.SIGINT)  # what the terminal does
            results = await asyncio.gather(*calls, return_exceptions=True)
            await client.close()
            return len(pending), results

        in_flight, results = asyncio.run(load_then_ctrl_c())
        code = server.process.wait(timeout=120)
        failed = [r.message() if isinstance(r, InferenceServerException) else repr(r) for r in results if isinstance(r, Exception)]  # fmt: skip
        log = server.log()
        assert in_flight > 0, "every request finished before the signal: nothing was left to drain"
        assert not failed, failed
        assert code == 0, log[-4000:]
        assert "received SIGINT: draining" in log
        assert "failed" not in log.split("received SIGINT", 1)[1], log[-4000:]
    finally:
        stop_server(server)
