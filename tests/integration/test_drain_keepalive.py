"""The drain budget holds with keep-alive clients: idle HTTP/1.1 connections held open by clients that never
close them do not stretch the shutdown, and the requests in flight at SIGTERM are all answered.

tritonserver 2.51 waits on SIGTERM for open HTTP connections to close, on the same --exit-timeout-secs as
in-flight inference; a pod whose clients keep connections alive would spend its whole grace period there.
"""

from __future__ import annotations

import logging
import signal
import socket
import time

import pytest

from reliability.copies import linked_copy
from tests.integration.conftest import signal_under_load, start_server, stop_server, wait_ready

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

EXIT_TIMEOUT_S = 12
KEEPALIVE_CLIENTS = 4


def _keepalive_connection(http_url: str) -> socket.socket:
    """An HTTP/1.1 connection that made one call and is kept open, idle, as a pooled client's would be."""
    host, port = http_url.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.sendall(f"GET /v2/health/live HTTP/1.1\r\nHost: {http_url}\r\nConnection: keep-alive\r\n\r\n".encode())
    assert sock.recv(4096).startswith(b"HTTP/1.1 200"), "the server did not answer on the kept-alive connection"
    return sock


def test_sigterm_drains_within_the_budget_while_keepalive_clients_hold_connections(exported_repository, tmp_path):
    server = start_server(
        linked_copy(exported_repository, tmp_path / "repo"),
        tmp_path / "server.log",
        "--exit-timeout-s",
        str(EXIT_TIMEOUT_S),
    )
    held: list[socket.socket] = []
    try:
        wait_ready(server.http_url, server.process, 180)
        held = [_keepalive_connection(server.http_url) for _ in range(KEEPALIVE_CLIENTS)]

        burst = signal_under_load(
            server,
            lambda: server.process.send_signal(signal.SIGTERM),
            b"drain me while clients keep their connections " * 4,
            calls=36,
        )
        code = server.process.wait(timeout=4 * EXIT_TIMEOUT_S)
        took = time.monotonic() - burst.signalled
        log.info(
            "SIGTERM with %d requests in flight and %d idle keep-alive connections: exit %d after %.1f s (budget %d s)",
            burst.in_flight, KEEPALIVE_CLIENTS, code, took, EXIT_TIMEOUT_S,
        )  # fmt: skip
        assert burst.in_flight > 0, "every request finished before SIGTERM: nothing was left to drain"
        assert not burst.failed, burst.failed
        assert code == 0, server.log()[-4000:]
        # The budget is the launcher's --exit-timeout-s, whatever the idle connections do.
        assert took <= EXIT_TIMEOUT_S + 3, f"shutdown took {took:.1f} s with {KEEPALIVE_CLIENTS} keep-alive clients"
    finally:
        for sock in held:
            sock.close()
        stop_server(server)
