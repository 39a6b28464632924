"""The export step's configuration: one frozen dataclass, BERTSERVE_EXPORT_* env defaults, a thin CLI."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path

from export.errors import ConfigError
from export.model_configs import QUEUE_TIMEOUT_US

PRECISIONS = ("fp32", "fp16", "int8")
TARGETS = ("cpu", "cuda")
ENCODER_BACKENDS = ("native", "python")
ENV_PREFIX = "BERTSERVE_EXPORT_"


@dataclass(frozen=True)
class ExportConfig:
    model: str = "minilm"
    target: str = "cpu"
    precisions: tuple[str, ...] = ("fp32", "int8")
    max_batch: int = 32
    max_seq: int | None = None  # None: the checkpoint's own max_seq_length, else 128
    output: Path = Path("model_repository")
    int8_recipe: str | None = None  # None: try every recipe, fastest first; ship the first that passes
    instances: int = 1
    max_queue_delay_us: int = 500
    max_queue_size: int | None = None  # None: two full batches
    queue_timeout_us: int = QUEUE_TIMEOUT_US  # longest wait in a model's queue before UNAVAILABLE
    shedding: bool = True  # False: no queue policy at all (unbounded queues; see model_configs.QueuePolicy)
    gelu_epilogue: bool = True  # fp16 (CUDA): the FFN GELU inside its GEMM (export.fusion)
    skip: frozenset[str] = field(default_factory=frozenset)  # artifact paths not to build (e.g. {"onnx"})
    execution_env: Path | None = None  # the Python environment the backend stubs run in; None: this one
    # native: the encoder models run in the C++ backend inside tritonserver (backend/); python: in a backend stub
    encoder_backend: str = "native"
    threads: int = 0  # intra-op threads per encoder instance; 0: the CPUs the server process may use
    serve: str | None = None  # the precision bert serves; None: export.serving_choice's rule
    # AOTInductor packages tuned with Inductor's max-autotune for this machine; None: on for the CPU (measured to pay
    # there, docs/PERFORMANCE.md), off for CUDA (its tuning time at dynamic shapes is not measured yet)
    autotune: bool | None = None

    @property
    def tuned(self) -> bool:
        return self.autotune if self.autotune is not None else self.target == "cpu"

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ConfigError(f"unknown target {self.target!r}; choose from {', '.join(TARGETS)}")
        if self.encoder_backend not in ENCODER_BACKENDS:
            raise ConfigError(
                f"unknown encoder backend {self.encoder_backend!r}; choose from {', '.join(ENCODER_BACKENDS)}"
            )
        self._check_precisions()
        self._check_limits()

    def _check_precisions(self) -> None:
        if not self.precisions:
            raise ConfigError("no precision given")
        for p in self.precisions:
            if p not in PRECISIONS:
                raise ConfigError(f"unknown precision {p!r}; choose from {', '.join(PRECISIONS)}")
        if "fp16" in self.precisions and self.target == "cpu":
            raise ConfigError("fp16 needs --target cuda (this CPU path has no fast fp16 kernels)")
        if len(set(self.precisions)) != len(self.precisions):
            raise ConfigError(f"precision listed twice: {','.join(self.precisions)}")
        if self.serve is not None and self.serve not in self.precisions:
            raise ConfigError(
                f"--serve {self.serve} is not among the exported precisions ({','.join(self.precisions)})"
            )

    def _check_limits(self) -> None:
        if not 1 <= self.max_batch <= 1024:
            raise ConfigError(f"--max-batch must be in 1..1024, got {self.max_batch}")
        if self.max_seq is not None and self.max_seq < 8:
            raise ConfigError(f"--max-seq must be at least 8, got {self.max_seq}")
        if self.max_queue_delay_us < 0:
            raise ConfigError(f"--max-queue-delay-us must be at least 0, got {self.max_queue_delay_us}")
        if self.max_queue_size is not None and self.max_queue_size < self.max_batch:
            raise ConfigError(
                f"--max-queue-size must be at least --max-batch ({self.max_batch}): one execute may hand over a "
                f"full batch, got {self.max_queue_size}"
            )
        if self.queue_timeout_us < 1:
            raise ConfigError(f"--queue-timeout-us must be at least 1, got {self.queue_timeout_us}")
        if self.execution_env is not None and not (self.execution_env / "bin" / "python").exists():
            raise ConfigError(f"--execution-env {self.execution_env} is not a Python environment (no bin/python)")
        if self.instances < 1:
            raise ConfigError(f"--instances must be at least 1, got {self.instances}")
        if self.threads < 0:
            raise ConfigError(f"--threads must be 0 (the usable CPUs) or more, got {self.threads}")


def _env(name: str, default: str | None) -> str | None:
    return os.environ.get(ENV_PREFIX + name, default)


def _env_flag(name: str, default: bool | None) -> bool | None:
    """A boolean option's environment variable: 0, false, no or off turn it off; anything else on."""
    value = _env(name, None)
    return default if value is None else value.strip().lower() not in ("0", "false", "no", "off")


def parse_args(argv: list[str] | None = None) -> ExportConfig:
    d = ExportConfig.__dataclass_fields__
    p = argparse.ArgumentParser(
        prog="python -m export",
        description="Export a BERT checkpoint into a Triton model repository "
        "(torch.export, AOTInductor, TorchScript, ONNX; fp32/fp16/int8, each gated on accuracy).",
    )
    p.add_argument(
        "--model",
        default=_env("MODEL", d["model"].default),
        help="minilm (packaged all-MiniLM-L6-v2), bert-base (BertConfig() shape, seeded weights) "
        "or a local Hugging Face BERT directory",
    )
    p.add_argument("--target", default=_env("TARGET", d["target"].default), help="cpu or cuda")
    p.add_argument(
        "--precision",
        default=_env("PRECISION", None),
        help="comma-separated, from fp32,fp16,int8 (default: fp32,int8 on cpu; fp16,fp32 on cuda)",
    )
    p.add_argument("--max-batch", type=int, default=int(_env("MAX_BATCH", str(d["max_batch"].default))))
    p.add_argument(
        "--max-seq",
        type=int,
        default=_env("MAX_SEQ", None),
        help="default: the checkpoint's sentence-transformers max_seq_length, else 128",
    )
    p.add_argument("--output", type=Path, default=Path(_env("OUTPUT", str(d["output"].default))))
    p.add_argument(
        "--int8-recipe",
        default=_env("INT8_RECIPE", None),
        help="force one int8 recipe (default: the fastest that passes the gate)",
    )
    p.add_argument("--instances", type=int, default=int(_env("INSTANCES", "1")), help="Triton instance count per model")
    p.add_argument(
        "--max-queue-delay-us",
        type=int,
        default=int(_env("MAX_QUEUE_DELAY_US", str(d["max_queue_delay_us"].default))),
        help="longest a request waits in the dynamic batcher for others to join its batch (0: never waits); the "
        "Python tokenizer and a Python encoder (the native models batch what queues during a forward)",
    )
    p.add_argument(
        "--max-queue-size",
        type=int,
        default=_env("MAX_QUEUE_SIZE", None),
        help="requests that may wait per model before REJECT (default: 2 x max batch)",
    )
    p.add_argument(
        "--queue-timeout-us",
        type=int,
        default=int(_env("QUEUE_TIMEOUT_US", str(d["queue_timeout_us"].default))),
        help="longest wait in a model's queue before REJECT; clients may ask for less",
    )
    p.add_argument(
        "--no-shedding",
        dest="shedding",
        action="store_false",
        default=_env_flag("SHEDDING", True),
        help="no queue policy (no REJECT, unbounded queues): with one instance a model then never waits the "
        "batcher's 500 ms poll (see docs/PERFORMANCE.md)",
    )
    p.add_argument(
        "--no-gelu-epilogue",
        dest="gelu_epilogue",
        action="store_false",
        default=_env_flag("GELU_EPILOGUE", True),
        help="fp16: keep the FFN's exact GELU as a kernel of its own instead of cuBLASLt's GEMM epilogue "
        "(tanh GELU; see export/fusion.py)",
    )
    p.add_argument(
        "--skip",
        default=_env("SKIP", ""),
        help="comma-separated artifact paths not to build: onnx,torchscript",
    )
    p.add_argument(
        "--execution-env",
        type=Path,
        default=_env("EXECUTION_ENV", "") or None,
        help="Python environment (a venv directory) the server's backend stubs run in (default: this one)",
    )
    p.add_argument(
        "--encoder-backend",
        default=_env("ENCODER_BACKEND", d["encoder_backend"].default),
        help="native: the encoder models run in the C++ backend inside tritonserver (backend/); "
        "python: in a Python-backend stub process",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=int(_env("THREADS", "0")),
        help="intra-op threads per encoder instance (0: the CPUs the server process may use, affinity and cgroup quota)",
    )
    p.add_argument(
        "--serve",
        default=_env("SERVE", None),
        help="the precision bert serves (default: the lowest that passed its gate, unless another measured 10%% "
        "faster at batch 1; see export/serving_choice.py)",
    )
    p.add_argument(
        "--autotune",
        action=argparse.BooleanOptionalAction,
        default=_env_flag("AUTOTUNE", None),
        help="compile the AOTInductor packages with Inductor's max-autotune for this machine (C++ GEMM templates "
        "against oneDNN / MKL on the CPU, Triton templates against cuBLAS on CUDA; export/autotune.py). "
        "Default: on for the CPU, off for CUDA",
    )
    for action in p._actions:  # every option names the variable that sets it
        if action.option_strings and action.dest != "help":
            action.help = f"{action.help or ''} (env {ENV_PREFIX}{action.dest.upper()})".strip()
    a = p.parse_args(argv)
    if a.precision:
        precisions = tuple(s.strip() for s in a.precision.split(",") if s.strip())
    else:
        precisions = ("fp32", "int8") if a.target == "cpu" else ("fp16", "fp32")
    return ExportConfig(
        model=a.model,
        target=a.target,
        precisions=precisions,
        max_batch=a.max_batch,
        max_seq=int(a.max_seq) if a.max_seq is not None else None,
        output=a.output,
        int8_recipe=a.int8_recipe,
        instances=a.instances,
        max_queue_delay_us=a.max_queue_delay_us,
        max_queue_size=int(a.max_queue_size) if a.max_queue_size is not None else None,
        queue_timeout_us=a.queue_timeout_us,
        shedding=a.shedding,
        gelu_epilogue=a.gelu_epilogue,
        skip=frozenset(s.strip() for s in a.skip.split(",") if s.strip()),
        execution_env=a.execution_env,
        encoder_backend=a.encoder_backend,
        threads=a.threads,
        serve=a.serve or None,
        autotune=a.autotune,
    )
