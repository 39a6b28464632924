"""The launcher's own calls to tritonserver's restricted model-repository API, and the drain on shutdown."""

from __future__ import annotations

import json
import logging
import subprocess
import time
import urllib.request

from serving.config import ServeConfig

log = logging.getLogger(__name__)

DRAIN_POLL_S = 0.05


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


def drain_then_stop(admin: Admin, proc: subprocess.Popen, ensembles: list[str], timeout_s: float) -> None:
    """SIGTERM tritonserver once its ensembles have finished what they accepted.

    On SIGTERM tritonserver stops every model at once, so an ensemble request between two steps has its next step
    refused ("scheduler for model has stopped accepting new inference requests"). Unloading the ensembles first
    refuses new ensemble requests while the accepted ones run to the end on models that are still up; then
    tritonserver drains what was sent to the models directly."""
    deadline = time.monotonic() + timeout_s
    try:
        for name in ensembles:
            admin.unload(name)
        while time.monotonic() < deadline and proc.poll() is None:
            states = admin.states()
            if all(states.get(name) not in ("READY", "UNLOADING") for name in ensembles):
                break
            time.sleep(DRAIN_POLL_S)
        else:
            if proc.poll() is None:  # not when tritonserver ended on its own
                log.warning("ensembles %s still had requests in flight after %.0f s", ensembles, timeout_s)
    except OSError as e:
        log.error("draining the ensembles failed (%s): stopping tritonserver now", e)
    if proc.poll() is None:
        proc.terminate()
