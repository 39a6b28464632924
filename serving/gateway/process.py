"""The launcher's hook: the gateway as a child process of ``python -m serving``, started beside tritonserver and
stopped after it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from serving.launcher.config import ServeConfig

WILDCARD = ("0.0.0.0", "::", "")


def start(cfg: ServeConfig, preexec: Callable[[], None]) -> subprocess.Popen | None:
    """``python -m serving.gateway`` on ``cfg.gateway_port`` over this server's gRPC port; None when the port is 0."""
    if not cfg.gateway_port:
        return None
    triton = "127.0.0.1" if cfg.host in WILDCARD else cfg.host
    cmd = [
        sys.executable, "-m", "serving.gateway", "--host", cfg.host, "--port", str(cfg.gateway_port),
        "--triton-url", f"{triton}:{cfg.grpc_port}", "--repository", str(cfg.repository),
        "--exit-timeout-s", str(cfg.exit_timeout_s), *(["--api-keys", str(cfg.api_keys)] if cfg.api_keys else []),
    ]  # fmt: skip
    return subprocess.Popen(cmd, preexec_fn=preexec)


def stop(proc: subprocess.Popen | None, timeout_s: float) -> None:
    """SIGTERM (uvicorn answers what is in flight, then exits), SIGKILL after ``timeout_s``."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
