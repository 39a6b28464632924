"""The launcher's own calls to tritonserver's restricted model-repository API, and the drain on shutdown."""

from __future__ import annotations

import json
import logging
import subprocess
import time
import urllib.request

from serving.launcher.config import ServeConfig

log = logging.getLogger(__name__)

DRAIN_POLL_S = 0.05
# How long tritonserver may take to exit once SIGTERM found it with nothing in flight.
STOP_GRACE_S = 2.0


class Admin:
    """Load, unload and model state over HTTP, with the admin key the launcher gave tritonserver."""

    def __init__(self, cfg: ServeConfig, key: str) -> None:
        host = "127.0.0.1" if cfg.host in ("0.0.0.0", "::") else cfg.host
        self.base = f"http://{host}:{cfg.http_port}/v2"
        self.headers = {cfg.admin_header: key}

    def _post(self, path: str, timeout_s: float) -> bytes:
        req = urllib.request.Request(f"{self.base}/{path}", data=b"{}", method="POST", headers=self.headers)
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.read()

    def load(self, model: str) -> None:
        self._post(f"repository/models/{model}/load", 300)

    def unload(self, model: str) -> None:
        self._post(f"repository/models/{model}/unload", 30)

    def states(self) -> dict[str, str]:
        """Model name to its repository state (READY, UNLOADING, UNAVAILABLE, ...)."""
        return {m["name"]: m.get("state", "") for m in json.loads(self._post("repository/index", 5))}

    def ready(self, model: str) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base}/models/{model}/ready", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False


def _unload_and_wait(admin: Admin, proc: subprocess.Popen, models: list[str], deadline: float) -> bool:
    """Unload ``models`` and wait until none is READY or UNLOADING (Triton unloads a model once the requests it
    accepted are answered). False when the deadline came first."""
    if not models:
        return True
    for name in models:
        admin.unload(name)
    while time.monotonic() < deadline and proc.poll() is None:
        states = admin.states()
        if all(states.get(name) not in ("READY", "UNLOADING") for name in models):
            return True
        time.sleep(DRAIN_POLL_S)
    if proc.poll() is None:  # not when tritonserver ended on its own
        log.warning("models %s still had requests in flight at the end of the drain budget", models)
    return False


def drain_then_stop(
    admin: Admin, proc: subprocess.Popen, ensembles: list[str], timeout_s: float, models: list[str] | None = None
) -> bool:
    """Answer what was accepted within ``timeout_s``, then stop tritonserver. True when every model had finished
    its requests before tritonserver was stopped.

    On SIGTERM tritonserver stops every model at once, so an ensemble request between two steps has its next step
    refused ("scheduler for model has stopped accepting new inference requests"). Unloading the ensembles first
    refuses new ensemble requests while the accepted ones run to the end on models that are still up; then the
    other ``models`` are unloaded, which answers what was sent to them directly.

    Only then does tritonserver get SIGTERM. Before it stops its models, tritonserver 2.51 waits for every open
    HTTP connection to close, on the same exit timeout: clients that keep idle connections alive would hold it
    for the whole timeout and then make it exit 1. With nothing left in flight, it gets STOP_GRACE_S to exit and
    is killed after that."""
    deadline = time.monotonic() + timeout_s
    drained = False
    try:
        drained = _unload_and_wait(admin, proc, ensembles, deadline)
        rest = [m for m in models or () if m not in ensembles]
        drained = drained and _unload_and_wait(admin, proc, rest, deadline)
    except OSError as e:
        log.error("draining the models failed (%s): stopping tritonserver now", e)
        drained = False
    if proc.poll() is None:
        proc.terminate()
        try:
            # Drained: nothing is left for it to finish, only idle connections to wait for. Otherwise the rest of
            # the budget is its own to drain in.
            budget = 0.0 if drained else max(deadline - time.monotonic(), 0.0)
            proc.wait(timeout=budget + STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            log.warning(
                "tritonserver was still waiting for idle client connections to close at the end of the drain "
                "budget%s: killing it",
                " (nothing was in flight)" if drained else "",
            )
            proc.kill()
            proc.wait()
    return drained
