"""The load tester's one configuration object: defaults, BERTSERVE_LOADTEST_* environment overrides, a thin CLI
(common.options)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import options
from common.options import option
from serving.client import DEFAULT_URL

ENV_PREFIX = "BERTSERVE_LOADTEST_"
DESCRIPTION = (
    "Load-test the Triton embedding service and judge p50/p99 against a latency budget. "
    "Exit 0: SLO met, 1: breached, 2: could not run."
)
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)


class ConfigError(ValueError):
    """An invalid setting; the message names the setting."""


def int_list(text: str) -> tuple[int, ...]:
    """Comma-separated integers, as --concurrency takes them."""
    return options.value(tuple[int, ...], text)


@dataclass(frozen=True)
class LoadTestConfig:
    """Everything one load-test run needs. Latencies in milliseconds, durations in seconds."""

    url: str = option(DEFAULT_URL, "server address host:port (gRPC 8001, HTTP 8000)")
    protocol: str = option("grpc", "grpc, http, or openai (the gateway's /v1/embeddings; --url host:8080)")
    model: str = option("embed", "the model every request calls")
    mode: str = option("closed", "closed (fixed concurrency) or open (arrival rate)")
    concurrency: tuple[int, ...] = option(DEFAULT_CONCURRENCY, "closed-loop sweep, comma-separated")
    rates: tuple[float, ...] = option((50.0, 100.0, 200.0), "open-loop sweep in requests/s, comma-separated")
    arrival: str = option("poisson", "open loop's arrival process: poisson or constant")
    duration_s: float = option(10.0, "measurement window per step (0: --requests only)")
    requests: int = option(0, "stop a step after this many requests (0: duration only)")
    warmup_s: float = option(2.0, "uncounted traffic before measuring (0: none)")
    request_timeout_s: float = option(10.0, "how long one request may take before it counts as timed out")
    ready_timeout_s: float = option(10.0, "how long to wait for the server and model to be ready")
    max_inflight: int = option(1024, "open loop: most requests in flight at once")
    budget_ms: float = option(10.0, "latency budget the SLO percentiles are judged against")
    slo_percentiles: tuple[float, ...] = option((50.0, 99.0), "percentiles that must stay within the budget")
    max_error_rate: float = option(0.0, "highest share of failed requests a step may have and pass")
    find_max: bool = option(False, "search the highest load whose --find-max-percentile stays within budget")
    find_max_percentile: float = option(99.0, "the percentile --find-max holds within the budget")
    find_max_limit: float = option(256.0, "highest load --find-max probes")
    find_max_probes: int = option(10, "most steps --find-max measures")
    payload: str = option("corpus", "corpus (shipped sentences) or fixed (--token-length tokens)")
    token_length: int = option(16, "tokens per text with --payload fixed")
    corpus: Path | None = option(None, "a file of sentences, one a line (# comments)", shown="loadtest/data/corpus.txt")
    tokenizer: Path | None = option(
        None, "tokenizer.json that measures --payload fixed texts", shown="the packaged checkpoint's, if installed"
    )
    pool_size: int = option(512, "distinct payloads, cycled through in a seeded order")
    seed: int = option(0, "seed of the payload order and open-loop arrivals")
    metrics_port: int = option(9108, "port of the tester's own Prometheus metrics (0 disables)")
    metrics_address: str = option("127.0.0.1", "address the tester's metrics bind to")
    output_dir: Path = option(Path("reports/loadtest"), "where the JSON, CSV and plot go")
    plot: bool = option(True, "write a latency plot (PNG) beside the JSON and CSV")
    progress: bool = option(True, "show a progress bar per step (on a terminal)")

    def __post_init__(self) -> None:
        _check(self.protocol in ("grpc", "http", "openai"), "protocol must be grpc, http or openai")
        _check(self.mode in ("closed", "open"), "mode must be closed or open")
        _check(self.arrival in ("poisson", "constant"), "arrival must be poisson or constant")
        _check(self.payload in ("corpus", "fixed"), "payload must be corpus or fixed")
        _check(bool(self.concurrency) and min(self.concurrency) >= 1, "concurrency levels must be >= 1")
        _check(bool(self.rates) and min(self.rates) > 0, "rates must be > 0 requests/s")
        _check(self.duration_s > 0 or self.requests > 0, "need duration_s > 0 or requests > 0")
        _check(self.duration_s >= 0 and self.requests >= 0, "duration_s and requests must be >= 0")
        _check(self.warmup_s >= 0, "warmup_s must be >= 0")
        _check(self.request_timeout_s > 0 and self.ready_timeout_s > 0, "timeouts must be > 0")
        _check(self.max_inflight >= 1, "max_inflight must be >= 1")
        _check(self.budget_ms > 0, "budget_ms must be > 0")
        _check(all(0 < p <= 100 for p in self.slo_percentiles), "slo_percentiles must be in (0, 100]")
        _check(0 < self.find_max_percentile <= 100, "find_max_percentile must be in (0, 100]")
        _check(0 <= self.max_error_rate <= 1, "max_error_rate must be in [0, 1]")
        _check(self.find_max_probes >= 2 and self.find_max_limit >= 1, "find_max needs probes >= 2, limit >= 1")
        _check(1 <= self.token_length <= 512, "token_length must be in [1, 512]")
        _check(self.pool_size >= 1, "pool_size must be >= 1")
        _check(0 <= self.metrics_port <= 65535, "metrics_port must be a port number (0 disables)")

    @property
    def loads(self) -> tuple[float, ...]:
        """The sweep: concurrency levels in closed loop, request rates in open loop."""
        return tuple(float(c) for c in self.concurrency) if self.mode == "closed" else self.rates

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in out.items()}


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def load_config(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> LoadTestConfig:
    """Command line, then environment, then defaults. Raises ConfigError; argparse exits 2 on bad flags."""
    return options.parse(
        LoadTestConfig,
        argv,
        prefix=ENV_PREFIX,
        prog="python -m loadtest",
        description=DESCRIPTION,
        env=env,
        error=ConfigError,
    )
