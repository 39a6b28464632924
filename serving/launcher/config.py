"""The server launcher's configuration: one frozen dataclass, BERTSERVE_SERVE_* env defaults, a thin CLI."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

ENV_PREFIX = "BERTSERVE_SERVE_"

# Triton APIs (HTTP) / protocols (gRPC) that only an operator holding the admin key may call: loading and
# unloading models, and the trace and logging settings (a trace file path is a file the server writes).
RESTRICTED = ("model-repository", "trace", "logging")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


@dataclass(frozen=True)
class ServeConfig:
    repository: Path = Path("model_repository")
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    tritonserver: str = ""  # empty: a tritonserver on PATH, else the one bundled in the pytriton wheel
    exit_timeout_s: int = 30  # how long SIGTERM / Ctrl-C waits for in-flight requests
    # gRPC connections are closed (GOAWAY) after this long, so that long-lived clients resolve the Service's
    # addresses again and reach replicas added since they connected; calls in flight get the grace to finish.
    # 0: connections live for ever (tritonserver's default).
    grpc_max_connection_age_s: int = 60
    grpc_max_connection_age_grace_s: int = 30
    log_verbose: int = 0
    # Header that carries the admin key on model-repository, trace and logging calls (gRPC metadata is lower case).
    admin_header: str = "bertserve-admin-key"
    # The admin key; empty: a random one per start, known to no one, so those APIs are closed. Never logged.
    admin_key: str = field(default="", repr=False)
    grpc_use_ssl: bool = False  # TLS on gRPC with grpc_server_cert / grpc_server_key (PEM files)
    grpc_ssl_mutual: bool = False  # mutual TLS: clients must present a certificate signed by grpc_root_cert
    grpc_server_cert: str = ""
    grpc_server_key: str = ""
    grpc_root_cert: str = ""

    def __post_init__(self) -> None:
        if not self.admin_header or self.admin_header != self.admin_header.lower() or ":" in self.admin_header:
            raise ValueError(f"admin_header must be a lower-case header name, got {self.admin_header!r}")
        if any(c in self.admin_key for c in ",:= \t\n"):
            raise ValueError("admin_key must not contain ',', ':', '=' or white space")
        tls = self.grpc_use_ssl or self.grpc_ssl_mutual
        if tls and not (self.grpc_server_cert and self.grpc_server_key):
            raise ValueError("gRPC TLS needs --grpc-server-cert and --grpc-server-key")
        if self.grpc_ssl_mutual and not self.grpc_root_cert:
            raise ValueError("mutual TLS needs --grpc-root-cert (the CA that signs client certificates)")
        if self.grpc_max_connection_age_s < 0 or self.grpc_max_connection_age_grace_s < 0:
            raise ValueError("gRPC connection age and grace must be 0 or more seconds")
        for path in (self.grpc_server_cert, self.grpc_server_key, self.grpc_root_cert):
            if path and not Path(path).is_file():
                raise ValueError(f"certificate file {path} does not exist")

    @property
    def grpc_admin_header(self) -> str:
        """The metadata key a gRPC client sends the admin key in (Triton prefixes the configured header)."""
        return GRPC_HEADER_PREFIX + self.admin_header

    @property
    def loopback_only(self) -> bool:
        return self.host in LOOPBACK


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


HELP = {
    "repository": "the exported model repository (make export writes model_repository/)",
    "host": "address the HTTP, gRPC and metrics endpoints bind to (0.0.0.0 exposes them; see README)",
    "http_port": "HTTP/REST endpoint (KServe v2 protocol)",
    "grpc_port": "gRPC endpoint",
    "metrics_port": "Prometheus metrics endpoint (Triton's and the bertserve_* families)",
    "tritonserver": "the tritonserver binary (empty: one on PATH, else the one bundled in the pytriton wheel)",
    "exit_timeout_s": "how long SIGTERM / Ctrl-C waits for in-flight requests before tritonserver stops",
    "grpc_max_connection_age_s": "gRPC connections are closed (GOAWAY) after this long, so long-lived clients "
    "resolve the Service again and reach new replicas (0: never)",
    "grpc_max_connection_age_grace_s": "how long calls in flight on an aged connection may still take",
    "log_verbose": "tritonserver's --log-verbose level",
    "admin_header": "header that carries the admin key on model-repository, trace and logging calls",
    "admin_key": "the admin key for those calls (empty: random per start, so the APIs are closed; never logged)",
    "grpc_use_ssl": "TLS on gRPC with --grpc-server-cert and --grpc-server-key (PEM files)",
    "grpc_ssl_mutual": "mutual TLS: clients present a certificate signed by --grpc-root-cert",
    "grpc_server_cert": "the server's certificate (PEM) for gRPC TLS",
    "grpc_server_key": "the server's private key (PEM) for gRPC TLS",
    "grpc_root_cert": "the CA (PEM) that signs client certificates, for mutual TLS",
}


def parse_args(argv: list[str] | None = None) -> ServeConfig:
    p = argparse.ArgumentParser(
        prog="python -m serving",
        description="Serve the exported repository on tritonserver. Every option can also be set as "
        f"{ENV_PREFIX}<OPTION>; the command line wins.",
    )
    for f in fields(ServeConfig):
        env = ENV_PREFIX + f.name.upper()
        default = os.environ.get(env, str(f.default))
        kind = {"int": int, int: int, "bool": _bool, bool: _bool}.get(f.type, str)
        shown = "random per start" if f.name == "admin_key" else (str(f.default) or "none")
        help_text = f"{HELP[f.name]} (default: {shown}; env {env})".replace("%", "%%")
        p.add_argument("--" + f.name.replace("_", "-"), type=kind, default=kind(default), help=help_text)
    a = vars(p.parse_args(argv))
    a["repository"] = Path(a["repository"])
    try:
        return ServeConfig(**a)
    except ValueError as e:
        p.error(str(e))
        raise
