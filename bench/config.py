"""The benchmark's one configuration object: defaults, BENCH_* environment overrides, a thin CLI."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, replace
from pathlib import Path

ENV_PREFIX = "BENCH_"
DEVICES = ("cpu", "cuda")
# Variant families; each expands to one or more variants that apply to the device.
FAMILIES = ("eager", "compile", "aoti", "int8", "onnx")
# Opt-in: the AOTInductor packages export --autotune builds, beside the default ones (on CUDA also
# torch.compile max-autotune per static shape); minutes of tuning.
ALL_FAMILIES = (*FAMILIES, "autotune")


class ConfigError(ValueError):
    """An invalid setting; the message names the setting."""


def int_list(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def str_list(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark run. Latency budgets in milliseconds."""

    model: str = "minilm"
    device: str = "cpu"
    batches: tuple[int, ...] = (1, 8, 32)
    seqs: tuple[int, ...] = (16, 64, 128)
    families: tuple[str, ...] = FAMILIES
    rounds: int = 7  # timed rounds; every variant runs every shape once per round, in rotating order
    cell_budget_ms: float = 100.0  # timed work per (variant, shape) per round; at least one call
    max_calls: int = 200  # per (variant, shape) per round
    warmup: int = 2  # uncounted calls per (variant, shape) after the first (compiling) one
    threads: int = 0  # torch intra-op threads (0: leave torch's default); onnxruntime uses the same
    seed: int = 0
    build_budget_s: float = 0.0  # stop building further variants once building and warm-up took this long (0: no limit)
    repository: Path | None = None  # load AOTInductor/int8 artifacts from an exported repository instead
    int8_recipes: tuple[str, ...] = ()  # int8 recipes to time (empty: every recipe that runs on the device)
    output_dir: Path = Path("reports")
    retrieval: bool = True  # each variant's retrieval agreement with eager fp32 on export's retrieval set
    quick: bool = False

    def __post_init__(self) -> None:
        _check(self.device in DEVICES, f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        _check(bool(self.batches) and min(self.batches) >= 1, "batches must be positive integers")
        _check(bool(self.seqs) and min(self.seqs) >= 4, "seqs must be integers of at least 4")
        unknown = set(self.families) - set(ALL_FAMILIES)
        _check(not unknown, f"unknown families {sorted(unknown)}; choose from {', '.join(ALL_FAMILIES)}")
        _check(self.rounds >= 1, "rounds must be at least 1")
        _check(self.cell_budget_ms > 0, "cell_budget_ms must be positive")
        _check(self.max_calls >= 1, "max_calls must be at least 1")
        _check(self.warmup >= 0, "warmup must be non-negative")
        _check(self.threads >= 0, "threads must be non-negative")
        _check(self.build_budget_s >= 0, "build_budget_s must be non-negative")

    @property
    def max_batch(self) -> int:
        return max(self.batches)

    @property
    def max_seq(self) -> int:
        return max(self.seqs)

    @property
    def shapes(self) -> list[tuple[int, int]]:
        return [(b, s) for s in self.seqs for b in self.batches]

    def quickened(self) -> BenchConfig:
        """The smoke-run shape: two small shapes, one short round, one warm-up call."""
        return replace(
            self,
            batches=(min(self.batches),),
            seqs=tuple(sorted(set(self.seqs)))[:2],
            rounds=1,
            cell_budget_ms=5.0,
            max_calls=3,
            warmup=1,
            retrieval=False,
            quick=True,
        )


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _env(name: str, default: str) -> str:
    return os.environ.get(ENV_PREFIX + name, default)


def _joined(values: tuple[object, ...]) -> str:
    return ",".join(str(v) for v in values)


def parse_args(argv: list[str] | None = None) -> BenchConfig:
    d = BenchConfig()
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Time eager, torch.compile, AOTInductor, int8 and onnxruntime on the same seeded inputs "
        "in one process; write reports/bench-<device>.json and .md.",
    )
    p.add_argument("--model", default=_env("MODEL", d.model), help="minilm, bert-base or a local BERT directory")
    p.add_argument("--device", default=_env("DEVICE", ""), help="cpu or cuda (default: cuda when available)")
    p.add_argument("--batches", default=_env("BATCHES", _joined(d.batches)), help="comma-separated batch sizes")
    p.add_argument("--seqs", default=_env("SEQS", _joined(d.seqs)), help="comma-separated token lengths")
    p.add_argument(
        "--families", default=_env("FAMILIES", _joined(d.families)), help=f"subset of {_joined(ALL_FAMILIES)}"
    )
    p.add_argument("--rounds", type=int, default=int(_env("ROUNDS", str(d.rounds))))
    p.add_argument("--cell-budget-ms", type=float, default=float(_env("CELL_BUDGET_MS", str(d.cell_budget_ms))))
    p.add_argument("--max-calls", type=int, default=int(_env("MAX_CALLS", str(d.max_calls))))
    p.add_argument("--warmup", type=int, default=int(_env("WARMUP", str(d.warmup))))
    p.add_argument("--threads", type=int, default=int(_env("THREADS", str(d.threads))))
    p.add_argument("--seed", type=int, default=int(_env("SEED", str(d.seed))))
    p.add_argument(
        "--build-budget-s",
        type=float,
        default=float(_env("BUILD_BUDGET_S", str(d.build_budget_s))),
        help="seconds of building and warm-up after which the remaining variants are not built (0: no limit)",
    )
    p.add_argument(
        "--repository",
        type=Path,
        default=Path(_env("REPOSITORY", "")) if _env("REPOSITORY", "") else None,
        help="an exported model repository: time its AOTInductor and int8 artifacts instead of compiling them",
    )
    p.add_argument(
        "--int8-recipes",
        default=_env("INT8_RECIPES", ""),
        help="comma-separated int8 recipes to time (default: every one that runs on the device; with --repository: none but these, beside the exported models)",
    )
    p.add_argument("--output-dir", type=Path, default=Path(_env("OUTPUT_DIR", str(d.output_dir))))
    p.add_argument(
        "--retrieval",
        action=argparse.BooleanOptionalAction,
        default=_env("RETRIEVAL", "1") not in ("", "0", "false"),
        help="score each variant on export's retrieval set against eager fp32 (nearest-neighbour agreement, "
        "recall@10, min cosine); off in --quick",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        default=_env("QUICK", "") not in ("", "0", "false"),
        help="smoke run: smallest batch, two lengths, one round",
    )
    a = p.parse_args(argv)
    device = a.device or _default_device()
    try:
        cfg = BenchConfig(
            model=a.model,
            device=device,
            batches=int_list(a.batches),
            seqs=int_list(a.seqs),
            families=str_list(a.families),
            rounds=a.rounds,
            cell_budget_ms=a.cell_budget_ms,
            max_calls=a.max_calls,
            warmup=a.warmup,
            threads=a.threads,
            seed=a.seed,
            build_budget_s=a.build_budget_s,
            repository=a.repository,
            int8_recipes=str_list(a.int8_recipes),
            output_dir=a.output_dir,
            retrieval=a.retrieval,
        )
        if cfg.int8_recipes:
            from export.quantize import get_recipe

            for name in cfg.int8_recipes:
                get_recipe(name)
    except ValueError as e:
        p.error(str(e))
    return cfg.quickened() if a.quick else cfg


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
