"""The export pipeline: checkpoint -> encoder -> (quantize) -> artifacts -> gates -> Triton repository."""

from __future__ import annotations

import copy
import json
import logging
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from export import artifacts as art
from export import autotune, checkpoint, fp8, fusion, model_configs, native_tokenizer, serving_choice
from export.config import ExportConfig
from export.encoder import Encoder
from export.errors import AccuracyGateError, ConfigError, ExportError
from export.progress import Steps
from export.report import table
from export.repository import RepositoryWriter, serialize_strings
from export.specs import SINGLE, ModelNames
from export.verify import RETRIEVAL_MIN, Accuracy, Retrieval, Verifier, calibration_batches
from serving.contract import native
from serving.contract.artifacts import AOTI, EXPORTED_PROGRAM, FILENAMES, ONNX, PATHS, RUNTIME_PREFERENCE, TORCHSCRIPT

log = logging.getLogger(__name__)

ALL_PATHS = frozenset(PATHS)
WARMUP_TEXT = "The quick brown fox jumps over the lazy dog near the river bank."


@dataclass
class Variant:
    """One precision's module and the artifacts built from it."""

    precision: str
    module: nn.Module
    paths: frozenset[str]
    recipe: str | None = None
    rewrites: tuple[str, ...] = ()  # graph rewrites applied before export (export.fusion)
    built: dict[str, dict[str, Any]] = field(default_factory=dict)
    eager_accuracy: Accuracy | None = None
    retrieval: Retrieval | None = None  # the served artifact on the retrieval set: it decides whether bert may serve it
    runtime: str = ""
    latency_ms: float = float("inf")
    runner: art.Runner | None = field(default=None, repr=False)
    tuning: dict[str, Any] | None = None  # what --autotune ran and chose (export.autotune)
    names: ModelNames = SINGLE["embed"]  # the names of the checkpoint's models in the repository

    @property
    def staging_name(self) -> str:
        return self.names.staging(self.precision)


def _eager_runner(module: nn.Module, device: str) -> art.Runner:
    def run(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return module(input_ids.to(device), attention_mask.to(device)).float().cpu()

    return run


def _int8_variant(cfg: ExportConfig, encoder: nn.Module, verifier: Verifier, calib: list) -> Variant:
    """Try the int8 recipes in order; the first that passes the accuracy gate ships. (The retrieval gate, on the
    built artifact, then decides whether it serves bert; where the CPU computes bf16, int8_qk_bf16 goes first, the one
    recipe measured to hold retrieval: docs/INT8.md.)"""
    from export import quantize

    recipes = [quantize.get_recipe(cfg.int8_recipe)] if cfg.int8_recipe else list(quantize.RECIPES)
    recipes = [r for r in recipes if cfg.target in r.devices]  # e.g. CPU-only quantized kernels cannot serve CUDA
    failures: list[AccuracyGateError] = []
    for recipe in recipes:
        module = recipe.apply(encoder, calib).eval()
        try:
            acc = verifier.gate(f"int8 recipe {recipe.name} (eager)", "int8", _eager_runner(module, cfg.target))
        except AccuracyGateError as e:
            log.warning("%s", e)
            failures.append(e)
            continue
        log.info("int8 recipe %s passes: min cosine %.4f", recipe.name, acc.min_cosine)
        return Variant("int8", module, recipe.paths, recipe=recipe.name, eager_accuracy=acc)
    best = max(failures, key=lambda e: e.value, default=None)
    raise AccuracyGateError(
        f"int8 (no recipe passed: {', '.join(r.name for r in recipes) or 'none applies'})",
        best.metric if best else "minimum cosine",
        best.value if best else 0.0,
        best.gate if best else 0.99,
    )


def _build(
    cfg: ExportConfig, v: Variant, out_dir: Path, max_seq: int, verifier: Verifier, steps: Steps
) -> list[dict[str, Any]]:
    """Build, load back and gate every artifact path this variant can take."""
    tuned_at = autotune.example_shape(cfg.target, cfg.max_batch, max_seq) if cfg.tuned else (2, 16)
    fp32 = art.fp32_configs(cfg.target, cfg.tuned) if v.precision == "fp32" else {}
    not_built = []
    runners: dict[str, art.Runner] = {}
    ep = None
    for path in PATHS:
        if path not in v.paths or path in cfg.skip:
            why = "skipped by --skip" if path in cfg.skip else f"{v.recipe or v.precision} cannot take this path"
            not_built.append({"model": v.staging_name, "path": path, "reason": why})
            continue
        file = out_dir / FILENAMES[path]
        with steps.step(f"{v.precision}: {path}"):
            start = time.perf_counter()
            try:
                if path in (EXPORTED_PROGRAM, AOTI) and ep is None:
                    ep = art.export_program(v.module, cfg.target, cfg.max_batch, max_seq, tuned_at)
                if path == EXPORTED_PROGRAM:
                    art.save_exported_program(ep, file)
                elif path == AOTI and cfg.tuned:
                    with autotune.recording(cfg.target, tuned_at) as tuning:
                        art.compile_aoti(ep, file, autotune.inductor_configs(cfg.target))
                    v.tuning = tuning.summary()
                elif path == AOTI:
                    art.compile_aoti(ep, file, fp32)
                elif path == TORCHSCRIPT:
                    art.trace_torchscript(v.module, cfg.target, file)
                else:
                    art.export_onnx(v.module, cfg.target, file, cfg.max_batch, max_seq)
            except ExportError:
                raise
            except Exception as e:
                raise art.ArtifactError(f"{v.staging_name}: building the {path} artifact failed: {e}") from e
            seconds = time.perf_counter() - start
            runner = art.load_runner(path, file, cfg.target)
            acc = verifier.gate(f"{v.staging_name} {path} ({file.name})", v.precision, runner)
        entry = {
            "path": path,
            "file": f"1/{file.name}",
            "seconds": round(seconds, 2),
            "bytes": file.stat().st_size,
        }
        entry.update(acc.as_dict())
        if path == AOTI:
            entry.update(art.aoti_kernel_report(file))
        v.built[path] = entry
        runners[path] = runner
    v.runtime = next((p for p in RUNTIME_PREFERENCE if p in v.built), "")
    if not v.runtime:
        raise art.ArtifactError(f"{v.staging_name}: no servable artifact (need one of {RUNTIME_PREFERENCE})")
    v.runner = runners[v.runtime]
    return not_built


def _variants(cfg: ExportConfig, encoder: nn.Module, verifier: Verifier, ckpt, max_seq: int) -> list[Variant]:
    out = []
    for p in cfg.precisions:
        if p == "fp32":
            out.append(Variant("fp32", encoder, ALL_PATHS))
        elif p == "fp16":
            module = copy.deepcopy(encoder).half()
            rewrites: tuple[str, ...] = ()
            if cfg.gelu_epilogue and fusion.fuse_gelu_epilogues(module):
                log.info("fp16: the FFN GELUs run as cuBLASLt GEMM epilogues (ONNX keeps them apart)")
                rewrites = ("gelu_epilogue",)
            out.append(Variant("fp16", module, ALL_PATHS - {TORCHSCRIPT}, rewrites=rewrites))
        elif p == "fp8":
            if why := fp8.unsupported(cfg.target):
                raise ConfigError(why)
            # torch.export and AOTInductor take _scaled_mm; ONNX and TorchScript have no fp8 GEMM to map it to
            module = fp8.quantize(copy.deepcopy(encoder))
            out.append(Variant("fp8", module, frozenset({EXPORTED_PROGRAM, AOTI}), recipe=fp8.RECIPE))
        else:
            out.append(_int8_variant(cfg, encoder, verifier, calibration_batches(ckpt.tokenizer, max_seq)))
    return out


def run(cfg: ExportConfig) -> Path:
    """The checkpoint as the repository's one embedder (`embed`, `bert`, ...), swapped in when complete."""
    log.info("export config: %s", cfg)
    writer = RepositoryWriter(cfg.output)
    try:
        writer.write_index(export_into(cfg, writer, SINGLE["embed"]))
        return writer.commit()
    except BaseException:
        writer.abort()
        raise


def export_into(cfg: ExportConfig, writer: RepositoryWriter, names: ModelNames) -> dict[str, Any]:
    """The checkpoint's models, named by ``names``, into ``writer``'s repository; returns their repository index."""
    steps = Steps(total=4 + len(cfg.precisions) * len(PATHS))
    try:
        with steps.step("load checkpoint"):
            ckpt = checkpoint.load(cfg.checkpoint)
            max_seq = ckpt.max_seq(cfg.max_seq)
        with steps.step("encoder + fp32 reference"):
            encoder = Encoder(ckpt.model).to(cfg.target).eval()
            verifier = Verifier(
                _eager_runner(encoder, cfg.target),
                ckpt.tokenizer,
                max_seq,
                batch=min(8, cfg.max_batch),
                max_batch=cfg.max_batch,
            )
            dynamo = art.graph_breaks(encoder, cfg.target)
        with steps.step("quantize / cast"):
            variants = _variants(cfg, encoder, verifier, ckpt, max_seq)
            for v in variants:
                v.names = names
        steps.bar.total = 6 + sum(len(v.paths - cfg.skip) for v in variants)
        not_built = []
        for v in variants:
            not_built += _build(cfg, v, writer.version_dir(v.staging_name), max_seq, verifier, steps)
        with steps.step("retrieval gate"):
            for v in variants:
                v.retrieval = verifier.retrieval(v.runner)
                log.info("%s (%s) on the retrieval set: %s", v.precision, v.runtime, v.retrieval)
        with steps.step("rank latency"):
            latency = serving_choice.batch1_latency_ms({v.precision: v.runner for v in variants})
            for v in variants:
                v.latency_ms = latency[v.precision]
        with steps.step("write repository"):
            report, index = _write_repository(cfg, writer, ckpt, max_seq, variants, dynamo, not_built, steps, names)
    finally:
        steps.close()
    sys.stderr.write(table(report) + "\n")
    return index


def _encoder_backend(cfg: ExportConfig, v: Variant) -> str:
    """The Triton backend that serves a variant: the native one unless asked otherwise or it cannot load the artifact."""
    if cfg.encoder_backend == "python":
        return "python"
    if v.runtime not in native.RUNTIMES:
        log.warning(
            "%s: the native backend cannot run a %s artifact; the Python backend serves it", v.precision, v.runtime
        )
        return "python"
    return native.NAME


def _write_repository(cfg, writer, ckpt, max_seq, variants, dynamo, not_built, steps, names: ModelNames):
    refused = {
        v.precision: v.retrieval.failures(f"{v.staging_name} {v.runtime}")[0]
        for v in variants
        if v.retrieval is not None and not v.retrieval.passed
    }
    choice = serving_choice.choose({v.precision: v.latency_ms for v in variants}, cfg.serve, refused)
    served = next(v for v in variants if v.precision == choice.precision)
    log.info("%s serves %s: %s", names.bert, choice.precision, choice.reason)
    model = {v.precision: (names.bert if v is served else v.staging_name) for v in variants}
    for v in variants:
        if model[v.precision] != v.staging_name:
            (writer.tmp / v.staging_name).rename(writer.tmp / model[v.precision])
    warm = ckpt.tokenizer(WARMUP_TEXT, truncation=True, max_length=max_seq, return_tensors="np")
    shape = model_configs.ServingShape(
        max_batch=cfg.max_batch,
        max_seq=max_seq,
        hidden=ckpt.hidden_size,
        instances=cfg.instances,
        kind="KIND_GPU" if cfg.target == "cuda" else "KIND_CPU",
        max_queue_delay_us=cfg.max_queue_delay_us,
        execution_env=str(cfg.execution_env or sys.prefix),
        warmup_seq=int(warm["input_ids"].shape[1]),
        queue=model_configs.QueuePolicy(cfg.max_queued_requests or 2 * cfg.max_batch, cfg.queue_timeout_us)
        if cfg.shedding
        else None,
        **cfg.admission,
        max_batch_tokens=cfg.max_batch_tokens or cfg.max_batch * max_seq,
    )
    report = {
        "dynamo": dynamo,
        "artifacts": [{"model": model[v.precision], **e} for v in variants for e in v.built.values()],
        "not_applicable": [{**n, "model": model[n["model"].removeprefix(names.staging(""))]} for n in not_built],
        "latency_ms": {model[v.precision]: round(v.latency_ms, 3) for v in variants},
        "served": {"precision": choice.precision, "reason": choice.reason},
        "retrieval": {model[v.precision]: _retrieval_entry(v) for v in variants},
        "runtime": {model[v.precision]: v.runtime for v in variants},
        "autotune": {model[v.precision]: v.tuning or {"ran": False} for v in variants},
        "steps_seconds": steps.seconds,
    }
    common = {
        "source": ckpt.source,
        "target": cfg.target,
        "max_batch": cfg.max_batch,
        "max_seq": max_seq,
        "hidden": ckpt.hidden_size,
        "vocab_size": ckpt.vocab_size,
        "torch": torch.__version__,
        **art.compiled_threads(cfg.target),
    }
    ids = warm["input_ids"][0].astype(np.int64)
    backends = {v.precision: _encoder_backend(cfg, v) for v in variants}
    for v in variants:
        name = model[v.precision]
        backend = backends[v.precision]
        writer.write_config(name, model_configs.bert_config(name, shape, v.precision, v.runtime, backend, cfg.threads))
        if backend == "python":
            writer.copy_model_code(name, "bert.py")
        writer.write_warmup(name, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        writer.write_manifest(
            name,
            {
                **common,
                "model": name,
                "precision": v.precision,
                "recipe": v.recipe,
                # rewrite -> the artifacts that carry it (ONNX traces the plain modules)
                "rewrites": {r: sorted(p for p in v.built if p != ONNX) for r in v.rewrites},
                "runtime": v.runtime,
                "artifacts": {p: {"file": e["file"]} for p, e in v.built.items()},
                "accuracy": {
                    **({"eager": v.eager_accuracy.as_dict()} if v.eager_accuracy else {}),
                    **{p: {k: e[k] for k in ("min_cosine", "mean_cosine", "spearman")} for p, e in v.built.items()},
                    "retrieval": _retrieval_entry(v),
                },
                "latency_ms_batch1": round(v.latency_ms, 3),
                "autotune": v.tuning or {"ran": False},
                "compile_report": report,
            },
        )
    tok, entry = names.tokenizer, names.entry
    ckpt.tokenizer.save_pretrained(str(writer.version_dir(tok) / "tokenizer"))
    tokenizer_json = writer.version_dir(tok) / "tokenizer" / "tokenizer.json"
    why = native_tokenizer.unsupported(json.loads(tokenizer_json.read_text()))
    if backends[served.precision] != native.NAME:
        why = "bert is not served by the native backend"
    writer.write_warmup(tok, {"text": serialize_strings([WARMUP_TEXT])})
    if why is None:  # the native backend tokenizes as the checkpoint does: no Python stub process
        writer.write_config(tok, _named(model_configs.native_tokenizer_config(shape), tok))
        tokenizer_rel = "1/tokenizer/tokenizer.json"
        writer.write_manifest(tok, {**common, "model": tok, "runtime": "none", "tokenizer": tokenizer_rel})
    else:
        writer.write_config(tok, _named(model_configs.tokenizer_config(shape), tok))
        writer.copy_model_code(tok, "tokenizer.py")
        writer.write_manifest(tok, {**common, "model": tok})
    models = {
        tok: native.NAME if why is None else "python",
        **{model[v.precision]: backends[v.precision] for v in variants},
    }
    if why is None:
        _write_native_embed(writer, shape, served, common, tokenizer_json, cfg.threads, names)
        models[entry] = native.NAME
    else:
        log.warning("%s is the ensemble of the Python tokenizer and bert: the native tokenizer cannot: %s", entry, why)
        writer.write_config(entry, model_configs.embed_config(shape, names.bert, entry, tok))
        writer.write_manifest(entry, {**common, "model": entry, "steps": [tok, names.bert]})
    ts_source = next((v for v in [served, *variants] if TORCHSCRIPT in v.built), None)
    if ts_source is not None:
        ts = names.torchscript
        writer.write_config(ts, _named(model_configs.torchscript_config(shape), ts))
        writer.link(ts, "model.pt", model[ts_source.precision], FILENAMES[TORCHSCRIPT])
        writer.write_manifest(ts, {**common, "model": ts, "precision": ts_source.precision})
        models[ts] = "pytorch"
    index = {
        **common,
        "served": {names.bert: served.precision},
        "served_reason": choice.reason,
        "models": {name: {"backend": backend} for name, backend in models.items()},
        "ensemble_requires": {} if models[entry] == native.NAME else {entry: [tok, names.bert]},
    }
    index["models"][entry].update(task="embed", encoder=names.bert)  # token ids go to the encoder
    return report, index


def _named(config: dict[str, Any], name: str) -> dict[str, Any]:
    """A generated config under the name the model takes in this repository."""
    return {**config, "name": name}


def _retrieval_entry(v: Variant) -> dict[str, Any]:
    """The retrieval gate's figures on the artifact the precision serves, and the floors."""
    return {"artifact": v.runtime, **(v.retrieval.as_dict() if v.retrieval else {}), "gate": RETRIEVAL_MIN}


def _write_native_embed(
    writer, shape, served: Variant, common: dict, tokenizer_json: Path, threads: int, names: ModelNames
) -> None:
    """`embed` as one native model: bert's artifact (linked) and the tokenizer.json the backend tokenizes with."""
    entry = names.entry
    file = served.built[served.runtime]["file"]  # "1/<name>"
    writer.link(entry, Path(file).name, names.bert, Path(file).name)
    (writer.version_dir(entry) / "tokenizer").mkdir()
    shutil.copyfile(tokenizer_json, writer.version_dir(entry) / "tokenizer" / "tokenizer.json")
    config = model_configs.native_embed_config(shape, served.precision, served.runtime, threads)
    writer.write_config(entry, _named(config, entry))
    writer.write_warmup(entry, {model_configs.WARMUP_TEXT: serialize_strings([WARMUP_TEXT])})
    writer.write_manifest(
        entry,
        {
            **common,
            "model": entry,
            "precision": served.precision,
            "recipe": served.recipe,
            "runtime": served.runtime,
            "artifacts": {served.runtime: {"file": file}},
            "tokenizer": "1/tokenizer/tokenizer.json",
        },
    )
