"""The export step's configuration: one frozen dataclass, BERTSERVE_EXPORT_* env defaults, a thin CLI
(common.options)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common import options
from common.options import option
from export import specs
from export.errors import ConfigError
from export.model_configs import QUEUE_TIMEOUT_US
from export.tasks import TASKS

PRECISIONS = ("fp32", "fp16", "int8", "fp8")
TARGETS = ("cpu", "cuda")
ENCODER_BACKENDS = ("native", "python")
ENV_PREFIX = "BERTSERVE_EXPORT_"
PROG = "python -m export"
DESCRIPTION = (
    "Export a BERT checkpoint into a Triton model repository "
    "(torch.export, AOTInductor, TorchScript, ONNX; fp32/fp16/int8, each gated on accuracy)."
)
DEFAULT_PRECISIONS = {"cpu": ("fp32", "int8"), "cuda": ("fp16", "fp32")}
# The native models' default deadline. On a GPU, the 10 ms budget: a batch takes 1-2 ms. On two CPU cores a forward
# of a few texts takes 5-60 ms and the costs measured at load are rough until batches correct them, so 10 ms would
# refuse ordinary bursts: the CPU keeps the 1 s that the queue timeout's soak chose (docs/PERFORMANCE.md).
DEFAULT_DEADLINE_US = {"cuda": 10_000, "cpu": QUEUE_TIMEOUT_US}
# The standing-queue rule (backend/src/work_queue.h) holds an open-loop overload's waits near its target instead of
# the deadline: on the CPU, 3x capacity on one core, ~80 ms p50 against ~1 s (docs/PERFORMANCE.md). A GPU's 10 ms
# deadline is shorter than any useful target, so it is off there.
DEFAULT_STANDING_QUEUE_US = {"cuda": 0, "cpu": 40_000}


@dataclass(frozen=True)
class ExportConfig:
    model: tuple[str, ...] = option(
        ("minilm",),
        "minilm (packaged all-MiniLM-L6-v2), bert-base (BertConfig() shape, seeded weights), "
        "minilm-cross-encoder (MiniLM with a seeded one-label head: scores that are NOT meaningful relevance; "
        "what --task rerank exports for minilm), minilm-classifier (MiniLM with a seeded three-label head: labels "
        "that are NOT meaningful; what --task classify exports for minilm) or a local Hugging Face BERT directory; "
        "or, once per model of a repository of several, NAME=CHECKPOINT[,task=T][,precision=P+P][,serve=P]"
        "[,max_seq=N][,max_batch=N][,instances=N][,int8_recipe=R] (export/specs.py; in the variable, specs "
        "separated by spaces)",
        repeat=True,
    )
    task: str | None = option(
        None,
        "embed (text -> embedding), rerank (query + documents -> scores; a cross-encoder) or classify "
        "(text or text pair -> logits, probabilities, label; a sequence classifier)",
        shown="from the checkpoint: a BertForSequenceClassification is rerank with one label, classify with more; "
        "else embed",
    )
    target: str = option("cpu", "cpu or cuda")
    precisions: tuple[str, ...] = option(
        (),
        "comma-separated, from fp32,fp16,int8,fp8 (fp8: CUDA, compute capability 8.9 on; empty: by target)",
        flag="--precision",
        shown=f"{','.join(DEFAULT_PRECISIONS['cpu'])} on cpu; {','.join(DEFAULT_PRECISIONS['cuda'])} on cuda",
    )
    max_batch: int = option(32, "largest batch a model takes")
    max_seq: int | None = option(None, "longest sequence in tokens", shown="the checkpoint's max_seq_length, else 128")
    output: Path = option(Path("model_repository"), "the model repository to write")
    int8_recipe: str | None = option(
        None, "force one int8 recipe", shown="every recipe, fastest first; the first that passes the gate ships"
    )
    instances: int = option(1, "Triton instance count per model")
    max_queue_delay_us: int = option(
        500,
        "longest a request waits in the dynamic batcher for others to join its batch (0: never waits); the "
        "Python tokenizer and a Python encoder (the native models batch what queues during a forward)",
    )
    # Requests, per model, in Triton's queue: the `max_queue_size` of Triton's queue policy, which only the
    # Python-backend encoder takes. The native models bound their queue by predicted work against each request's
    # deadline (--deadline-us; backend/src/scheduler.h), never by a count.
    max_queued_requests: int | None = option(
        None,
        "Python-backend encoder (--encoder-backend python): requests that may wait in Triton's queue per model "
        "before REJECT (Triton's max_queue_size); the native models admit by deadline instead (--deadline-us)",
        shown="two full batches (2 x --max-batch)",
    )
    queue_timeout_us: int = option(
        QUEUE_TIMEOUT_US, "longest wait in a model's queue before REJECT (UNAVAILABLE); clients may ask for less"
    )
    deadline_us: int | None = option(
        None,
        "native models: the deadline of a request that sends no timeout of its own (a client's timeout is its "
        "deadline); a request is refused at once (UNAVAILABLE) when the queued work predicts it would miss it",
        shown=f"{DEFAULT_DEADLINE_US['cuda']} on cuda (the budget); {DEFAULT_DEADLINE_US['cpu']} on cpu",
    )
    standing_queue_us: int | None = option(
        None,
        "native models: once every request without a timeout of its own has waited longer than this for 100 ms while "
        "more work came in than drained (an open-loop overload), such requests are admitted only while their "
        "predicted wait is shorter; 0: the deadline alone",
        shown=f"{DEFAULT_STANDING_QUEUE_US['cpu']} on cpu; {DEFAULT_STANDING_QUEUE_US['cuda']} (off) on cuda",
    )
    max_batch_tokens: int = option(
        0, "native models: padded tokens one batch may hold", shown="--max-batch x --max-seq (the rows bind)"
    )
    shedding: bool = option(
        True,
        "a queue policy: REJECT past --max-queued-requests or --queue-timeout-us; --no-shedding: none (unbounded "
        "queues; with one instance a model then never waits the batcher's 500 ms poll, see docs/PERFORMANCE.md)",
    )
    gelu_epilogue: bool = option(
        True,
        "fp16: the FFN's GELU inside its GEMM as cuBLASLt's epilogue (tanh GELU; export/fusion.py); "
        "--no-gelu-epilogue keeps the exact GELU as a kernel of its own",
    )
    skip: frozenset[str] = option(frozenset(), "comma-separated artifact paths not to build: onnx,torchscript")
    execution_env: Path | None = option(
        None, "Python environment (a venv directory) the server's backend stubs run in", shown="this one"
    )
    encoder_backend: str = option(
        "native",
        "native: the encoder models run in the C++ backend inside tritonserver (backend/); "
        "python: in a Python-backend stub process",
    )
    threads: int = option(
        0,
        "intra-op threads per encoder instance (0: the CPUs the server process may use, affinity and cgroup quota)",
    )
    serve: str | None = option(
        None,
        "the precision bert serves",
        shown="the lowest that passed its gate, unless another measured 10% faster at batch 1; "
        "see export/serving_choice.py",
    )
    # None: where it was measured to pay (export/autotune.py, tuned_by_default)
    autotune: bool | None = option(
        None,
        "compile the AOTInductor packages with Inductor's max-autotune for this machine (C++ GEMM templates "
        "against oneDNN / MKL on the CPU, Triton templates against cuBLAS on CUDA; export/autotune.py)",
        shown="on for CPUs with AVX-512, off for other CPUs and CUDA",
    )

    @property
    def checkpoint(self) -> str:
        """The one checkpoint of a single-model export."""
        if self.specs:
            raise ConfigError("a repository of several models has no one checkpoint: export each spec's")
        return self.model[0]

    @property
    def specs(self) -> tuple[specs.ModelSpec, ...]:
        """The NAME=SPEC models of a repository of several; () for a single-model export."""
        return specs.parse_all(self.model)

    @property
    def tuned(self) -> bool:
        from export.autotune import tuned_by_default

        return self.autotune if self.autotune is not None else tuned_by_default(self.target)

    @property
    def admission(self) -> dict[str, int]:
        """The native models' deadline_us and standing_queue_us: as given, else this target's defaults."""
        standing = DEFAULT_STANDING_QUEUE_US[self.target] if self.standing_queue_us is None else self.standing_queue_us
        return {"deadline_us": self.deadline_us or DEFAULT_DEADLINE_US[self.target], "standing_queue_us": standing}

    def __post_init__(self) -> None:
        if isinstance(self.model, str):
            object.__setattr__(self, "model", (self.model,))
        if not self.model:
            raise ConfigError("--model names no checkpoint")
        if self.specs and (self.task or self.serve):
            raise ConfigError(
                "--task and --serve are each model's own with NAME=CHECKPOINT specs: give task=... and serve=... in "
                "the spec"
            )
        if self.target not in TARGETS:
            raise ConfigError(f"unknown target {self.target!r}; choose from {', '.join(TARGETS)}")
        if self.task is not None and self.task not in TASKS:
            raise ConfigError(f"unknown task {self.task!r}; choose from {', '.join(TASKS)}")
        if self.encoder_backend not in ENCODER_BACKENDS:
            raise ConfigError(
                f"unknown encoder backend {self.encoder_backend!r}; choose from {', '.join(ENCODER_BACKENDS)}"
            )
        if not self.precisions:
            object.__setattr__(self, "precisions", DEFAULT_PRECISIONS[self.target])
        self._check_precisions()
        self._check_limits()

    def _check_precisions(self) -> None:
        for p in self.precisions:
            if p not in PRECISIONS:
                raise ConfigError(f"unknown precision {p!r}; choose from {', '.join(PRECISIONS)}")
        if "fp16" in self.precisions and self.target == "cpu":
            raise ConfigError("fp16 needs --target cuda (this CPU path has no fast fp16 kernels)")
        if "fp8" in self.precisions and self.target == "cpu":
            raise ConfigError("fp8 needs --target cuda (a GPU with fp8 tensor cores: Ada, Hopper or later)")
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
        if self.max_queued_requests is not None and self.max_queued_requests < self.max_batch:
            raise ConfigError(
                f"--max-queued-requests must be at least --max-batch ({self.max_batch}): one execute may hand over "
                f"a full batch, got {self.max_queued_requests}"
            )
        if self.deadline_us is not None and self.deadline_us < 1:
            raise ConfigError(f"--deadline-us must be at least 1, got {self.deadline_us}")
        if self.standing_queue_us is not None and self.standing_queue_us < 0:
            raise ConfigError(f"--standing-queue-us must be at least 0, got {self.standing_queue_us}")
        if self.max_batch_tokens < 0:
            raise ConfigError(f"--max-batch-tokens must be 0 (by the shape) or more, got {self.max_batch_tokens}")
        if self.queue_timeout_us < 1:
            raise ConfigError(f"--queue-timeout-us must be at least 1, got {self.queue_timeout_us}")
        if self.execution_env is not None and not (self.execution_env / "bin" / "python").exists():
            raise ConfigError(f"--execution-env {self.execution_env} is not a Python environment (no bin/python)")
        if self.instances < 1:
            raise ConfigError(f"--instances must be at least 1, got {self.instances}")
        if self.threads < 0:
            raise ConfigError(f"--threads must be 0 (the usable CPUs) or more, got {self.threads}")


def parse_args(argv: list[str] | None = None) -> ExportConfig:
    """Raises ConfigError on an invalid option or variable."""
    return options.parse(ExportConfig, argv, prefix=ENV_PREFIX, prog=PROG, description=DESCRIPTION, error=ConfigError)
