"""The server launcher's configuration: one frozen dataclass, BERTSERVE_SERVE_* env defaults, a thin CLI
(common.options)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common import options
from common.options import option

ENV_PREFIX = "BERTSERVE_SERVE_"
DESCRIPTION = "Serve the exported repository on tritonserver."

# Triton APIs (HTTP) / protocols (gRPC) that only an operator holding the admin key may call: loading and
# unloading models, the trace and logging settings (a trace file path is a file the server writes), and shared
# memory (a caller could register any /dev/shm object by name and have outputs written into it or read it as
# input). Of these the launcher itself calls model-repository (drain, stub watchdog), with the key.
RESTRICTED = ("model-repository", "trace", "logging", "shared-memory")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


@dataclass(frozen=True)
class ServeConfig:
    repository: Path = option(
        Path("model_repository"), "the exported model repository (make export writes model_repository/)"
    )
    host: str = option(
        "127.0.0.1", "address the HTTP, gRPC and metrics endpoints bind to (0.0.0.0 exposes them; see README)"
    )
    http_port: int = option(8000, "HTTP/REST endpoint (KServe v2 protocol)")
    grpc_port: int = option(8001, "gRPC endpoint")
    metrics_port: int = option(8002, "Prometheus metrics endpoint (Triton's and the bertserve_* families)")
    gateway_port: int = option(8080, "HTTP port of the OpenAI (/v1/embeddings) and TEI routes (0: none)")
    api_keys: Path | None = option(None, "file of 'client-name key' lines the OpenAI and TEI routes require")
    tritonserver: str = option(
        "", "the tritonserver binary", shown="a tritonserver on PATH, else the one bundled in the pytriton wheel"
    )
    exit_timeout_s: int = option(30, "how long SIGTERM / Ctrl-C waits for in-flight requests before tritonserver stops")
    grpc_max_connection_age_s: int = option(
        60,
        "gRPC connections are closed (GOAWAY) after this long, so long-lived clients resolve the Service again and "
        "reach new replicas (0: never, tritonserver's default)",
    )
    grpc_max_connection_age_grace_s: int = option(30, "how long calls in flight on an aged connection may still take")
    http_threads: int = option(0, "tritonserver's HTTP threads (0: tritonserver's own, 8)")
    grpc_allocation_pool: int = option(
        0, "inference request/response objects tritonserver's gRPC frontend keeps for reuse (0: tritonserver's own, 8)"
    )
    log_verbose: int = option(0, "tritonserver's --log-verbose level")
    admin_header: str = option(
        "bertserve-admin-key",
        "header that carries the admin key on model-repository, trace and logging calls (gRPC metadata: lower case)",
    )
    admin_key: str = option(
        "",
        "the admin key for those calls (a random one, known to no one, closes those APIs; never logged)",
        shown="random per start",
        repr=False,
    )
    grpc_use_ssl: bool = option(False, "TLS on gRPC with --grpc-server-cert and --grpc-server-key (PEM files)")
    grpc_ssl_mutual: bool = option(False, "mutual TLS: clients present a certificate signed by --grpc-root-cert")
    grpc_server_cert: str = option("", "the server's certificate (PEM) for gRPC TLS")
    grpc_server_key: str = option("", "the server's private key (PEM) for gRPC TLS")
    grpc_root_cert: str = option("", "the CA (PEM) that signs client certificates, for mutual TLS")

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
        if self.http_threads < 0 or self.grpc_allocation_pool < 0:
            raise ValueError("http_threads and grpc_allocation_pool must be 0 (tritonserver's own) or more")
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


def parse_args(argv: list[str] | None = None) -> ServeConfig:
    """Exits with argparse's message (status 2) on an invalid option or variable."""
    return options.parse(ServeConfig, argv, prefix=ENV_PREFIX, prog="python -m serving", description=DESCRIPTION)
