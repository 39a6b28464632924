"""Export for the ``rerank`` task: a cross-encoder checkpoint -> the native ``rerank`` model; and the path every
sequence-classifier task shares (``SequenceTask``: rerank here, classify in export/classify.py).

Traced with ``token_type_ids`` (TorchDynamo's count of graphs and breaks goes in the compile report), exported
with a dynamic batch and sequence, compiled by AOTInductor, loaded back and gated. fp32: its outputs (scores,
logits) on the shipped inputs against ``transformers``' own model on the same weights, max abs difference <= 1e-4.
int8 (export/sequence_int8.py, the CPU) and fp16 (export/sequence_fp16.py, CUDA): gated on what users see against
fp32 (rerank order, labels; export/sequence_gates.py). Every package that passes goes into the model's version
directory; the manifest names the one the native backend loads, chosen by the encoder's serving rule
(export/serving_choice.py). fp8 and the other artifact paths are not exported for these tasks yet.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.export import Dim
from torch.nn.attention import SDPBackend, sdpa_kernel

from export import artifacts as art
from export import cross_encoder, model_configs, native_tokenizer, sequence_fp16, sequence_int8, serving_choice, tasks
from export.checkpoint import DEFAULT_MAX_SEQ, _tokenizer
from export.config import ExportConfig
from export.errors import AccuracyGateError, ArtifactError, ConfigError
from export.repository import RepositoryWriter, serialize_strings
from export.verify import pairs as shipped_pairs
from serving.contract import native
from serving.contract.artifacts import AOTI, load_module

log = logging.getLogger(__name__)

MODEL = "rerank"
MAX_ABS_DIFF = 1e-4  # fp32 outputs against transformers' own model on the same weights
PRECISIONS = {"cpu": ("fp32", "int8"), "cuda": ("fp32", "fp16")}  # what these tasks export, by target
FP32_FILE = "model.pt2"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
WARMUP_QUERY = "what does the fox jump over"
WARMUP_DOCUMENTS = ("The quick brown fox jumps over the lazy dog.", "Stock markets fell sharply today.")


class ScoreGateError(AccuracyGateError):
    def __init__(self, artifact: str, value: float, gate: float, output: str = "score") -> None:
        metric = f"max abs {output} difference"
        Exception.__init__(self, f"{artifact}: {metric} {value:.2e} is above the gate {gate}")
        self.artifact, self.metric, self.value, self.gate = artifact, metric, value, gate


def example_inputs(device: str, batch: int = 2, seq: int = 16) -> tuple[torch.Tensor, ...]:
    ids = torch.randint(1000, 2000, (batch, seq), dtype=torch.int64, device=device)
    types = torch.zeros_like(ids)
    types[:, seq // 2 :] = 1
    return ids, torch.ones_like(ids), types


def graph_breaks(module: torch.nn.Module, device: str) -> dict[str, int]:
    explanation = torch._dynamo.explain(module)(*example_inputs(device))
    torch._dynamo.reset()
    return {"graphs": int(explanation.graph_count), "graph_breaks": int(explanation.graph_break_count)}


def _attention(module: torch.nn.Module, device: str) -> contextlib.AbstractContextManager:
    """fp32 on CUDA traces attention's math kernel: the memory-efficient kernel's padded-mask shape guard
    (seq * round_up(seq, 8) > 1) is one torch.export cannot prove for a dynamic length, and refuses."""
    if device.startswith("cuda") and next(module.parameters()).dtype == torch.float32:
        return sdpa_kernel([SDPBackend.MATH])
    return contextlib.nullcontext()


def compile_aoti(
    module: torch.nn.Module, device: str, max_batch: int, max_seq: int, path: Path, fp32: bool = False
) -> None:
    """``fp32``: the package holds no int8 GEMMs (artifacts.fp32_configs)."""
    dims = {0: Dim("batch", min=1, max=max_batch), 1: Dim("seq", min=2, max=max_seq)}
    with torch.no_grad(), _attention(module, device):
        ep = torch.export.export(module, example_inputs(device), dynamic_shapes=dict.fromkeys(INPUTS, dims))
        art.compile_aoti(ep, path, art.fp32_configs(device) if fp32 else None)


def gate_batches(tokenizer, max_seq: int) -> list[dict[str, torch.Tensor]]:
    """The shipped pairs as (query, document) batches of 8, encoded as the server encodes pairs."""
    rows = shipped_pairs()
    out = []
    for i in range(0, len(rows), 8):
        a, b = zip(*rows[i : i + 8], strict=True)
        enc = tokenizer(
            list(a), list(b), padding=True, truncation="longest_first", max_length=max_seq, return_tensors="pt"
        )
        out.append({k: enc[k] for k in INPUTS})
    return out


def max_abs_diff(module, artifact, batches, device: str) -> float:
    """The largest difference between the artifact's outputs and ``module``'s (transformers' own model, wrapped)."""
    worst = 0.0
    with torch.inference_mode():
        for batch in batches:
            args = [batch[k].to(device) for k in INPUTS]
            expected, got = module(*args), artifact(*args)
            worst = max(worst, float((got.float().cpu() - expected.float().cpu()).abs().max()))
    return worst


@dataclass(frozen=True)
class SequenceTask:
    """What one sequence-classifier task exports: its model (named as the task), the wrapper that is traced, the
    gate's inputs, the config and warm-up, and the seeded checkpoint built when ``--model`` names none."""

    name: str
    wrapper: Callable[[torch.nn.Module], torch.nn.Module]
    gate_batches: Callable[[Any, int], list[dict[str, torch.Tensor]]]
    config: Callable[[model_configs.ServingShape, int, dict[int, str]], dict[str, Any]]
    warmup: dict[str, bytes]
    warmup_seq: int
    seeded: str  # the name of the seeded checkpoint (tasks.SEEDED_*)
    seeded_labels: dict[int, str] | None  # None: one label
    output: str  # what the gate compares: "score" or "logit"


RERANK = SequenceTask(
    name=MODEL,
    wrapper=cross_encoder.CrossEncoder,
    gate_batches=gate_batches,
    config=lambda shape, threads, _labels: model_configs.rerank_config(shape, threads),
    warmup={
        model_configs.WARMUP_QUERY: serialize_strings([WARMUP_QUERY]),
        model_configs.WARMUP_DOCUMENTS: serialize_strings(list(WARMUP_DOCUMENTS)),
    },
    warmup_seq=len(WARMUP_QUERY.split()) + 16,
    seeded=tasks.SEEDED_CROSS_ENCODER,
    seeded_labels=None,
    output="score",
)


def _checkpoint(cfg: ExportConfig, task: SequenceTask, scratch: Path) -> tuple[Path, str]:
    """(directory, source for the manifest): the seeded stand-in, or the local directory --model names."""
    if cfg.checkpoint in ("minilm", task.seeded):
        path = cross_encoder.build_seeded(scratch / task.seeded, labels=task.seeded_labels)
        log.warning(
            "%s: %s is MiniLM with a seeded head (seed %d): its outputs are not meaningful %s; pass --model with a "
            "checkpoint directory for a real one",
            task.name,
            task.seeded,
            cross_encoder.SEED,
            "relevance" if task.seeded_labels is None else "labels",
        )
        return path, f"{task.seeded}: all-MiniLM-L6-v2 body, head seeded {cross_encoder.SEED}"
    path = Path(cfg.checkpoint).expanduser().resolve()
    if not (path / "config.json").is_file():
        raise ConfigError(f"--model {cfg.checkpoint}: not a local Hugging Face directory (no config.json)")
    return path, str(path)


def run(cfg: ExportConfig, task: SequenceTask = RERANK) -> Path:
    """The task's model as the repository's one model, named as the task, swapped in when complete."""
    writer = RepositoryWriter(cfg.output)
    try:
        writer.write_index(export_into(cfg, writer, task.name, task))
        return writer.commit()
    except BaseException:
        writer.abort()
        raise


def export_into(cfg: ExportConfig, writer: RepositoryWriter, name: str, task: SequenceTask = RERANK) -> dict[str, Any]:
    """The task's model as the model ``name`` into ``writer``'s repository; returns its repository index."""
    if cfg.encoder_backend != "native":
        raise ConfigError(f"--task {task.name} is served by the native backend only (no --encoder-backend python)")
    precisions = _precisions(cfg, task)
    with tempfile.TemporaryDirectory(prefix=f"bertserve-{task.name}-") as scratch:
        path, source = _checkpoint(cfg, task, Path(scratch))
        tasks.check(task.name, path)
        reference = cross_encoder.load(path).to(cfg.target)
        tokenizer = _tokenizer(path)
        return _export(cfg, task, writer, name, path, source, reference, tokenizer, precisions)


def _precisions(cfg: ExportConfig, task: SequenceTask) -> tuple[str, ...]:
    """The precisions of ``--precision`` this task exports on the target (fp32 when none of them is)."""
    exported = PRECISIONS[cfg.target]
    wanted = tuple(p for p in cfg.precisions if p in exported)
    if other := [p for p in cfg.precisions if p not in exported]:
        log.info(
            "%s: %s not exported for this task on %s (it exports %s)",
            task.name, ",".join(other), cfg.target, ", ".join(exported),
        )  # fmt: skip
    wanted = wanted or ("fp32",)
    if cfg.serve is not None and cfg.serve not in wanted:
        raise ConfigError(f"--serve {cfg.serve}: the {task.name} task exports {', '.join(wanted)} here")
    return wanted


def _export(
    cfg: ExportConfig,
    task: SequenceTask,
    writer,
    name: str,
    path: Path,
    source: str,
    reference,
    tokenizer,
    precisions: tuple[str, ...] = ("fp32",),
) -> dict[str, Any]:
    limit = int(reference.config.max_position_embeddings)
    max_seq = cfg.max_seq or min(DEFAULT_MAX_SEQ, limit)
    if max_seq > limit:
        raise ConfigError(f"--max-seq {max_seq} is above the checkpoint's position limit {limit}")
    module = task.wrapper(reference).eval()
    dynamo = graph_breaks(module, cfg.target)
    log.info("%s: TorchDynamo sees %d graph(s), %d break(s)", name, dynamo["graphs"], dynamo["graph_breaks"])
    version = writer.version_dir(name)
    packages: dict[str, Any] = {}
    files: dict[str, str] = {}
    accuracy: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    if "fp32" in precisions:
        start = time.perf_counter()
        artifact = version / FP32_FILE
        try:
            compile_aoti(module, cfg.target, cfg.max_batch, max_seq, artifact, fp32=True)
            loaded = load_module(AOTI, artifact, cfg.target, cuda_graphs=False)
        except Exception as e:
            raise ArtifactError(f"{task.name}: building the aoti artifact failed: {e}") from e
        diff = max_abs_diff(module, loaded, task.gate_batches(tokenizer, max_seq), cfg.target)
        if diff > MAX_ABS_DIFF:
            raise ScoreGateError(f"{name} aoti ({artifact.name})", diff, MAX_ABS_DIFF, task.output)
        log.info("%s: aoti %ss within %.2e of transformers' (gate %.0e)", name, task.output, diff, MAX_ABS_DIFF)
        packages["fp32"], files["fp32"] = _on_target(cfg.target)(loaded), f"1/{artifact.name}"
        accuracy["fp32"] = {f"max_abs_{task.output}_diff": diff, "gate": MAX_ABS_DIFF}
        seconds["fp32"] = round(time.perf_counter() - start, 1)
    refused = {}
    on_target = _on_target(cfg.target)
    gate = (
        sequence_int8.judge(task.name, on_target(module), tokenizer, max_seq, cfg.max_batch)
        if {"int8", "fp16"} & set(precisions)
        else None
    )

    def load(file: Path):
        return on_target(load_module(AOTI, file, cfg.target, cuda_graphs=False))

    attempts: dict[str, Any] = {}
    if "fp16" in precisions:
        attempts["fp16"] = sequence_fp16.build(
            task.name, module, gate, version,
            lambda m, file: compile_aoti(m, cfg.target, cfg.max_batch, max_seq, file), load,
        )  # fmt: skip
    if "int8" in precisions:
        attempts["int8"] = sequence_int8.build(
            cfg, task.name, module, tokenizer, max_seq, gate, version, compile_aoti, load,
        )  # fmt: skip
    for precision, attempt in attempts.items():  # sequence_fp16.Half or sequence_int8.Int8
        accuracy[precision], seconds[precision] = attempt.as_dict(), round(attempt.seconds, 1)
        if attempt.module is not None:
            packages[precision], files[precision] = attempt.module, f"1/{attempt.file.name}"
        if attempt.refused is not None:
            refused[precision] = attempt.refused
    int8 = attempts.get("int8")
    latency = _latency_ms(packages)
    choice = serving_choice.choose(latency, cfg.serve, refused, gate=f"{task.name} gate", model=name)
    log.info("%s serves %s: %s", name, choice.precision, choice.reason)

    tokenizer.save_pretrained(str(version / "tokenizer"))
    spec = json.loads((version / "tokenizer" / "tokenizer.json").read_text())
    if why := native_tokenizer.unsupported(spec) or native_tokenizer.pair_unsupported(spec):
        raise ConfigError(f"{task.name}: the native tokenizer cannot encode this checkpoint's pairs: {why}")
    labels = tasks.labels(path)
    shape = _shape(cfg, max_seq, int(reference.config.hidden_size), task.warmup_seq)
    writer.write_config(name, {**task.config(shape, cfg.threads, labels), "name": name})
    writer.write_warmup(name, task.warmup)
    common = {
        "source": source,
        "target": cfg.target,
        "max_batch": cfg.max_batch,
        "max_seq": max_seq,
        "hidden": int(reference.config.hidden_size),
        "vocab_size": int(reference.config.vocab_size),
        "torch": torch.__version__,
        **art.compiled_threads(cfg.target),
    }
    manifest: dict[str, Any] = {
        **common,
        "model": name,
        "task": task.name,
        "pooling": cross_encoder.POOLING,
        "head": cross_encoder.HEAD,
        "labels": {str(k): v for k, v in labels.items()},
        "precision": choice.precision,
        "recipe": int8.recipe if int8 and choice.precision == "int8" else None,
        "runtime": AOTI,
        "inputs": list(INPUTS),
        "artifacts": {AOTI: {"file": files[choice.precision]}},
        "packages": files,  # every precision's package in the version directory; `artifacts` names the served one
        "tokenizer": "1/tokenizer/tokenizer.json",
        "accuracy": accuracy,
        "compile_report": {
            "dynamo": dynamo,
            "seconds": seconds,
            "latency_ms_batch1": {p: round(ms, 3) for p, ms in latency.items() if ms},  # timed when 2 serve
            "served": {"precision": choice.precision, "reason": choice.reason},
        },
    }
    writer.write_manifest(name, manifest)
    return {
        **common,
        "task": task.name,
        "served": {name: choice.precision},
        "served_reason": choice.reason,
        "models": {name: {"backend": native.NAME, "task": task.name}},
        "ensemble_requires": {},
    }


def _on_target(target: str) -> Callable[[Any], Any]:
    """A scorer that takes the CPU tensors the gates and the latency ranking build, on ``target``: its inputs moved
    there, its outputs back, the device done before it returns (so the ranking times the work)."""
    if target == "cpu":
        return lambda scorer: scorer

    def wrap(scorer):
        def run(*inputs: torch.Tensor) -> torch.Tensor:
            return scorer(*(x.to(target) for x in inputs)).float().cpu()  # .cpu() waits for the device

        return run

    return wrap


def _latency_ms(packages: dict[str, Any]) -> dict[str, float]:
    """Each package's batch-1 latency (serving_choice's timing, single texts as one-segment pairs); no timing when
    there is only one to serve."""
    if len(packages) < 2:
        return dict.fromkeys(packages, 0.0)

    def runner(package):
        return lambda ids, mask: package(ids, mask, torch.zeros_like(ids))

    with torch.inference_mode():
        return serving_choice.batch1_latency_ms({p: runner(m) for p, m in packages.items()})


def _shape(cfg: ExportConfig, max_seq: int, hidden: int, warmup_seq: int) -> model_configs.ServingShape:
    return model_configs.ServingShape(
        max_batch=cfg.max_batch,
        max_seq=max_seq,
        hidden=hidden,
        instances=cfg.instances,
        kind="KIND_GPU" if cfg.target == "cuda" else "KIND_CPU",
        max_queue_delay_us=cfg.max_queue_delay_us,
        execution_env=str(cfg.execution_env or sys.prefix),
        warmup_seq=warmup_seq,
        # No Triton queue policy (the configs have no dynamic batching): it marks whether the backend sheds by
        # deadline (--shedding), as for the native encoder.
        queue=model_configs.QueuePolicy.for_batch(cfg.max_batch, cfg.queue_timeout_us) if cfg.shedding else None,
        **cfg.admission,
        max_batch_tokens=cfg.max_batch_tokens or cfg.max_batch * max_seq,
    )
