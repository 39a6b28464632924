"""Ctrl-C in the terminal that runs `make serve`: the terminal sends SIGINT to the whole foreground process group.

tritonserver runs in a process group of its own, so the signal reaches the launcher alone; the launcher drains
(the `embed` ensemble first, then the models) and only then stops tritonserver. Before, tritonserver got the
SIGINT too, closed its ports at once, and the launcher's drain failed with "Connection refused".
"""

from __future__ import annotations

import os
import signal

import pytest

from reliability.copies import linked_copy
from tests.integration.conftest import signal_under_load, start_server, stop_server, wait_ready

pytestmark = pytest.mark.integration


def test_ctrl_c_to_the_process_group_answers_every_request_in_flight(exported_repository, tmp_path):
    server = start_server(linked_copy(exported_repository, tmp_path / "repo"), tmp_path / "server.log")
    try:
        wait_ready(server.http_url, server.process, 180)

        # what the terminal does: SIGINT to the whole foreground group
        text = b"a request in flight when the user presses Ctrl-C " * 3
        burst = signal_under_load(server, lambda: os.killpg(server.process.pid, signal.SIGINT), text, calls=24)
        code = server.process.wait(timeout=120)
        log = server.log()
        assert burst.in_flight > 0, "every request finished before the signal: nothing was left to drain"
        assert not burst.failed, burst.failed
        assert code == 0, log[-4000:]
        assert "received SIGINT: draining" in log
        assert "failed" not in log.split("received SIGINT", 1)[1], log[-4000:]
    finally:
        stop_server(server)
