"""The server launcher's configuration: one frozen dataclass, BERTSERVE_SERVE_* env defaults, a thin CLI."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, fields
from pathlib import Path

ENV_PREFIX = "BERTSERVE_SERVE_"


@dataclass(frozen=True)
class ServeConfig:
    repository: Path = Path("model_repository")
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    tritonserver: str = ""  # empty: a tritonserver on PATH, else the one bundled in the pytriton wheel
    exit_timeout_s: int = 30  # how long SIGTERM / Ctrl-C waits for in-flight requests
    log_verbose: int = 0


def parse_args(argv: list[str] | None = None) -> ServeConfig:
    p = argparse.ArgumentParser(prog="python -m serving", description="Serve the exported repository on tritonserver.")
    for f in fields(ServeConfig):
        default = os.environ.get(ENV_PREFIX + f.name.upper(), str(f.default))
        kind = int if f.type in ("int", int) else str
        p.add_argument("--" + f.name.replace("_", "-"), type=kind, default=kind(default))
    a = vars(p.parse_args(argv))
    a["repository"] = Path(a["repository"])
    return ServeConfig(**a)
