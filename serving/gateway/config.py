"""The gateway's configuration: one frozen dataclass, BERTSERVE_GATEWAY_* env defaults, a thin CLI (common.options).

The launcher starts the gateway with its own ports and keys (``python -m serving --gateway-port``); run alone,
``python -m serving.gateway --triton-url HOST:8001`` fronts any running server."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common import options
from common.options import option

ENV_PREFIX = "BERTSERVE_GATEWAY_"
DESCRIPTION = "Serve OpenAI's /v1/embeddings and text-embeddings-inference's routes over tritonserver's gRPC endpoint."


@dataclass(frozen=True)
class GatewayConfig:
    host: str = option("127.0.0.1", "address the gateway binds to (0.0.0.0 exposes it: give it --api-keys)")
    port: int = option(8080, "HTTP port of the OpenAI and TEI routes")
    triton_url: str = option("127.0.0.1:8001", "tritonserver's gRPC endpoint")
    model: str = option("embed", "the text model: TEXT in, EMBEDDING (and TOKENS) out")
    encoder: str = option("bert", "the encoder that token-id inputs go to (input_ids, attention_mask)")
    repository: Path | None = option(
        None, "the served repository: /tokenize's tokenizer and /info's model details (without it /tokenize is 503)"
    )
    api_keys: Path | None = option(
        None, "file of 'client-name key' lines: every route but /health and /metrics needs 'Bearer <key>'"
    )
    max_body_bytes: int = option(4 << 20, "largest request body taken (HTTP 413 above it; nginx's default too)")
    max_inputs: int = option(2048, "most inputs one request may carry (OpenAI's limit)")
    exit_timeout_s: int = option(30, "how long SIGTERM waits for requests in flight")
    max_calls: int = option(
        2, "calls to the text model out at once before requests wait to share the next (0: every request its own call)"
    )

    def __post_init__(self) -> None:
        if self.max_calls < 0:
            raise ValueError("max_calls must be 0 or more")
        if self.max_body_bytes <= 0 or self.max_inputs <= 0:
            raise ValueError("max_body_bytes and max_inputs must be positive")


def parse_args(argv: list[str] | None = None) -> GatewayConfig:
    """Exits with argparse's message (status 2) on an invalid option or variable."""
    return options.parse(
        GatewayConfig, argv, prefix=ENV_PREFIX, prog="python -m serving.gateway", description=DESCRIPTION
    )
