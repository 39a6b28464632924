"""The load tester's one configuration object: defaults, LOADTEST_* environment overrides, a thin CLI."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_PREFIX = "LOADTEST_"
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)


class ConfigError(ValueError):
    """An invalid setting; the message names the setting."""


def int_list(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def float_list(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def optional_path(text: str) -> Path | None:
    return Path(text) if text else None


@dataclass(frozen=True)
class LoadTestConfig:
    """Everything one load-test run needs. Latencies in milliseconds, durations in seconds."""

    url: str = "127.0.0.1:8001"
    protocol: str = "grpc"
    model: str = "embed"
    mode: str = "closed"
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    rates: tuple[float, ...] = (50.0, 100.0, 200.0)
    arrival: str = "poisson"
    duration_s: float = 10.0
    requests: int = 0
    warmup_s: float = 2.0
    request_timeout_s: float = 10.0
    ready_timeout_s: float = 10.0
    max_inflight: int = 1024
    budget_ms: float = 10.0
    slo_percentiles: tuple[float, ...] = (50.0, 99.0)
    max_error_rate: float = 0.0
    find_max: bool = False
    find_max_percentile: float = 99.0
    find_max_limit: float = 256.0
    find_max_probes: int = 10
    payload: str = "corpus"
    token_length: int = 16
    corpus: Path | None = None
    tokenizer: Path | None = None
    pool_size: int = 512
    seed: int = 0
    metrics_port: int = 9108
    metrics_address: str = "127.0.0.1"
    output_dir: Path = Path("reports/loadtest")
    plot: bool = True
    progress: bool = True

    def __post_init__(self) -> None:
        _check(self.protocol in ("grpc", "http"), "protocol must be grpc or http")
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


_PARSERS: dict[str, Callable[[str], Any]] = {
    "concurrency": int_list,
    "rates": float_list,
    "slo_percentiles": float_list,
    "corpus": optional_path,
    "tokenizer": optional_path,
    "output_dir": Path,
    "find_max": boolean,
    "plot": boolean,
    "progress": boolean,
}


def _parser_for(f: dataclasses.Field[Any]) -> Callable[[str], Any]:
    if f.name in _PARSERS:
        return _PARSERS[f.name]
    default = f.default
    if isinstance(default, bool):
        return boolean
    return type(default) if isinstance(default, int | float) else str


def _fields() -> list[dataclasses.Field[Any]]:
    return list(dataclasses.fields(LoadTestConfig))


def from_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Overrides taken from LOADTEST_<FIELD> variables, e.g. LOADTEST_BUDGET_MS=5."""
    env = os.environ if env is None else env
    overrides: dict[str, Any] = {}
    for f in _fields():
        raw = env.get(ENV_PREFIX + f.name.upper())
        if raw is None:
            continue
        try:
            overrides[f.name] = _parser_for(f)(raw)
        except ValueError as exc:
            raise ConfigError(f"{ENV_PREFIX}{f.name.upper()}={raw!r}: {exc}") from exc
    return overrides


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest",
        description="Load-test the Triton embedding service and judge p50/p99 against a latency budget. "
        "Every option can also be set as LOADTEST_<OPTION> (e.g. LOADTEST_BUDGET_MS=5). "
        "Exit 0: SLO met, 1: breached, 2: could not run.",
    )
    helps = {
        "url": "server address host:port (gRPC 8001, HTTP 8000)",
        "mode": "closed (fixed concurrency) or open (arrival rate)",
        "concurrency": "closed-loop sweep, comma separated",
        "rates": "open-loop sweep in requests/s, comma separated",
        "duration_s": "measurement window per step",
        "requests": "stop a step after this many requests (0: duration only)",
        "budget_ms": "latency budget the SLO percentiles are judged against",
        "slo_percentiles": "percentiles that must stay within the budget",
        "find_max": "search the highest load whose --find-max-percentile stays within budget",
        "payload": "corpus (shipped sentences) or fixed (--token-length tokens)",
        "metrics_port": "port of the tester's own Prometheus metrics (0 disables)",
    }
    defaults = LoadTestConfig()
    for f in _fields():
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        shown = ",".join(str(x) for x in default) if isinstance(default, tuple) else default
        parser.add_argument(
            flag,
            dest=f.name,
            type=_parser_for(f),
            default=None,
            metavar=f.name.upper(),
            help=f"{helps.get(f.name, f.name.replace('_', ' '))} (default: {shown})",
        )
    return parser


def load_config(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> LoadTestConfig:
    """Defaults, then environment, then command line. Raises ConfigError; argparse exits 2 on bad flags."""
    values = from_env(env)
    args = build_parser().parse_args(argv)
    values.update({k: v for k, v in vars(args).items() if v is not None})
    try:
        return LoadTestConfig(**values)
    except TypeError as exc:
        raise ConfigError(str(exc)) from exc
