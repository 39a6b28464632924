"""Every inference path the benchmark times, each built (or loaded) into the same call interface.

A variant turns the shared CPU inputs into its own argument once (``prepare``, untimed), is timed on
``call`` alone, and hands its output back as a CPU float32 tensor (``to_cpu``, untimed) for the accuracy
column. Torch variants get their inputs already on the device; the serving runtime gets numpy arrays, as
the Triton model does, so its figures include the host-device copies.
"""

from __future__ import annotations

import copy
import functools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bench.config import BenchConfig
from bench.inputs import Model, calibration
from export import artifacts as art
from export import autotune, fusion
from serving.contract.artifacts import AOTI, TORCHSCRIPT, load_module

log = logging.getLogger(__name__)

EAGER_FP32 = "eager fp32"


@dataclass
class Variant:
    name: str
    precision: str
    call: Callable[[Any], Any]
    prepare: Callable[[torch.Tensor, torch.Tensor], Any]
    to_cpu: Callable[[Any], torch.Tensor]
    build_s: float = 0.0
    note: str = ""
    shapes: frozenset[tuple[int, int]] | None = None  # None: every shape of the run


@dataclass(frozen=True)
class Plan:
    """A variant not built yet: built one at a time so that each one's memory can be measured alone."""

    name: str
    build: Callable[[], Variant]


def _torch_variant(name: str, precision: str, module: Callable[..., Any], device: str, note: str = "") -> Variant:
    def prepare(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return ids.to(device), mask.to(device)

    def call(args: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        with torch.inference_mode():
            return module(*args)

    return Variant(name, precision, call, prepare, lambda out: out.float().cpu(), note=note)


def _graph_tree_variant(name: str, module: Callable[..., Any], device: str) -> Variant:
    """torch.compile(mode="reduce-overhead"): outputs live in the graph pool, so each call marks a new step."""
    v = _torch_variant(name, "fp16", module, device, note="CUDA graphs (cudagraph trees)")
    inner = v.call

    def call(args: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        torch.compiler.cudagraph_mark_step_begin()
        return inner(args)

    v.call = call
    v.to_cpu = lambda out: out.float().cpu().clone()
    return v


def _timed(build: Callable[[], Variant]) -> Callable[[], Variant]:
    def wrapped() -> Variant:
        start = time.perf_counter()
        v = build()
        v.build_s = time.perf_counter() - start
        return v

    return wrapped


class Builder:
    """Knows the model, the device and a scratch directory; yields the plans of the families asked for."""

    def __init__(self, cfg: BenchConfig, model: Model, workdir: Path) -> None:
        self.cfg, self.model, self.workdir = cfg, model, workdir
        self.device = cfg.device
        self.cuda = cfg.device == "cuda"
        self.reference = model.encoder.to(self.device).eval()
        self._half: nn.Module | None = None

    @property
    def half(self) -> nn.Module:
        if self._half is None:
            self._half = copy.deepcopy(self.reference).half().eval()
        return self._half

    def plans(self) -> Iterator[Plan]:
        families = self.cfg.families
        yield Plan(EAGER_FP32, _timed(lambda: _torch_variant(EAGER_FP32, "fp32", self.reference, self.device)))
        if "eager" in families and self.cuda:
            yield Plan("eager fp16", _timed(lambda: _torch_variant("eager fp16", "fp16", self.half, self.device)))
        if "compile" in families:
            yield from self._compile_plans()
        if self.cfg.repository is not None and ("aoti" in families or "int8" in families):
            yield from self._repository_plans(self.cfg.repository)
            if "int8" in families and self.cfg.int8_recipes:  # recipes named beside the exported ones
                yield from self._int8_plans()
        else:
            if "aoti" in families:
                yield from self._aoti_plans()
            if "int8" in families:
                yield from self._int8_plans()
        if "onnx" in families and not self.cuda:
            yield from self._onnx_plans()
        if "autotune" in families:
            yield from self._autotune_plans()

    # torch.compile ------------------------------------------------------------------------------------
    def _compile_plans(self) -> Iterator[Plan]:
        if not self.cuda:
            name = "compile fp32"
            yield Plan(name, _timed(lambda: _torch_variant(name, "fp32", torch.compile(self.reference), "cpu")))
            return
        name = "compile fp16"
        yield Plan(name, _timed(lambda: _torch_variant(name, "fp16", torch.compile(self.half), self.device)))
        name_ro = "compile fp16 reduce-overhead"
        yield Plan(
            name_ro,
            _timed(
                lambda: _graph_tree_variant(
                    name_ro, torch.compile(copy.deepcopy(self.half), mode="reduce-overhead"), self.device
                )
            ),
        )

    def _autotune_plans(self) -> Iterator[Plan]:
        """The AOTInductor packages export --autotune builds (fp32 and the int8 recipes here; fp16 on CUDA), and
        on CUDA torch.compile max-autotune per static shape. Their build time includes the tuning."""
        if not self.cuda:
            yield from self._aoti_module_plans("fp32 autotuned", "fp32-tuned", lambda: self.reference, tuned=True)
            yield from self._int8_plans(tuned=True)
            return
        yield from self._aoti_module_plans("fp16 GELU epilogue autotuned", "fp16-gelu-tuned", self._half_gelu_epilogue,
                                           tuned=True)  # fmt: skip
        name = "compile fp16 max-autotune static"
        shapes = frozenset((b, self.cfg.max_seq) for b in (1, 32) if (b, self.cfg.max_seq) in self.cfg.shapes)

        def build() -> Variant:
            module = torch.compile(copy.deepcopy(self.half), mode="max-autotune", dynamic=False)
            v = _graph_tree_variant(name, module, self.device)
            v.shapes, v.note = shapes, "Triton GEMM templates autotuned per static shape, CUDA graphs"
            return v

        if shapes:
            yield Plan(name, _timed(build))

    # AOTInductor --------------------------------------------------------------------------------------
    def _aoti_package(self, module: Callable[[], nn.Module], tag: str, tuned: bool = False, fp32: bool = False) -> Path:
        """``fp32``: an fp32 package, its GEMMs compiled as export compiles them (artifacts.fp32_configs)."""
        path = self.workdir / f"{tag}.aoti.pt2"
        if not path.exists():
            ep = art.export_program(module(), self.device, max(2, self.cfg.max_batch), max(16, self.cfg.max_seq))
            configs = autotune.inductor_configs(self.device) if tuned else {}
            art.compile_aoti(ep, path, {**configs, **(art.fp32_configs(self.device, tuned) if fp32 else {})})
        return path

    def _aoti_plans(self) -> Iterator[Plan]:
        if not self.cuda:
            yield from self._aoti_module_plans("fp32", "fp32", lambda: self.reference)
            return
        yield from self._aoti_module_plans("fp16", "fp16", lambda: self.half)
        yield from self._aoti_module_plans("fp16 GELU epilogue", "fp16-gelu", self._half_gelu_epilogue)

    def _half_gelu_epilogue(self) -> nn.Module:
        module = copy.deepcopy(self.half)
        fusion.fuse_gelu_epilogues(module)
        return module

    def _aoti_module_plans(
        self, label: str, tag: str, module: Callable[[], nn.Module], tuned: bool = False
    ) -> Iterator[Plan]:
        """The AOTInductor package of ``module()`` called directly, and on CUDA behind the serving Runtime."""
        precision = "fp16" if self.cuda else "fp32"
        name = f"aoti {label}"

        def build() -> Variant:
            path = self._aoti_package(module, tag, tuned, fp32=precision == "fp32")
            return _torch_variant(name, precision, load_module(AOTI, path, self.device), self.device)

        yield Plan(name, _timed(build))
        if self.cuda:
            name_rt = f"aoti {label} + CUDA graphs (serving Runtime)"

            def build_runtime() -> Variant:
                path = self._aoti_package(module, tag, tuned)
                return _runtime_variant(name_rt, precision, path.parent, _manifest_for(path), self.device)

            yield Plan(name_rt, _timed(build_runtime))

    # int8 ---------------------------------------------------------------------------------------------
    def _int8_plans(self, tuned: bool = False) -> Iterator[Plan]:
        from export import quantize

        chosen = self.cfg.int8_recipes
        for recipe in [quantize.get_recipe(n) for n in chosen] if chosen else quantize.RECIPES:
            if self.device not in recipe.devices:
                log.info("int8 recipe %s: its kernels do not run on %s, not timed", recipe.name, self.device)
                continue
            kind = AOTI if AOTI in recipe.paths else TORCHSCRIPT
            if tuned and kind != AOTI:
                continue
            name = f"int8 {recipe.name} ({kind}{' autotuned' if tuned else ''})"
            yield Plan(name, _timed(functools.partial(self._int8_variant, recipe, kind, name, tuned)))
            if tuned:
                continue
            if self.cuda:
                name_rt = f"int8 {recipe.name} ({kind}) + CUDA graphs (serving Runtime)"
                yield Plan(name_rt, _timed(functools.partial(self._int8_runtime_variant, recipe, name_rt)))

    def _int8_variant(self, recipe: Any, kind: str, name: str, tuned: bool = False) -> Variant:
        calib = [(i.to(self.device), m.to(self.device)) for i, m in calibration(self.model, self.cfg.max_seq, 0)]
        # .to(device): the outlier split builds its int8 Linear on the CPU whatever the source module's device.
        module = recipe.apply(self.half if self.cuda else self.reference, calib).eval().to(self.device)
        if kind == AOTI:
            path = self._aoti_package(lambda: module, f"int8-{recipe.name}{'-tuned' if tuned else ''}", tuned)
        else:
            path = self.workdir / f"int8-{recipe.name}.ts"
            art.trace_torchscript(module, self.device, path)
        return _torch_variant(name, "int8", load_module(kind, path, self.device), self.device, note=recipe.name)

    def _int8_runtime_variant(self, recipe: Any, name: str) -> Variant:
        path = self.workdir / f"int8-{recipe.name}.aoti.pt2"
        if not path.exists():
            raise FileNotFoundError(f"{path.name} was not built (the int8 AOTInductor variant failed)")
        return _runtime_variant(name, "int8", path.parent, _manifest_for(path), self.device)

    # an exported repository ---------------------------------------------------------------------------
    def _repository_plans(self, repository: Path) -> Iterator[Plan]:
        from serving.contract import manifest as mf

        for model_dir in sorted(p for p in repository.iterdir() if (p / mf.MANIFEST).is_file()):
            manifest = mf.read(model_dir)
            kind, precision = manifest.get("runtime"), manifest.get("precision")
            if not kind or precision not in ("fp32", "fp16", "int8"):
                continue
            if manifest.get("target") != self.device:
                log.info("%s was exported for %s, not %s: skipped", model_dir.name, manifest.get("target"), self.device)
                continue
            name = f"repo {model_dir.name} {kind} {precision}"
            yield Plan(name, _timed(functools.partial(self._repository_variant, model_dir, manifest, name)))
            if self.cuda:
                name_rt = f"{name} + CUDA graphs (serving Runtime)"
                build_rt = functools.partial(_runtime_variant, name_rt, precision, model_dir, manifest, self.device)
                yield Plan(name_rt, _timed(build_rt))

    def _repository_variant(self, model_dir: Path, manifest: dict[str, Any], name: str) -> Variant:
        from serving.contract import manifest as mf

        kind = manifest["runtime"]
        rel = manifest["artifacts"][kind]["file"]
        mf.verify(model_dir, manifest, only=[rel])
        module = load_module(kind, model_dir / rel, self.device)
        note = str(model_dir / rel)
        if (compiled := manifest.get("compiled_threads")) and compiled != torch.get_num_threads():
            note += f"; compiled for {compiled} threads, timed at {torch.get_num_threads()}"
        return _torch_variant(name, manifest["precision"], module, self.device, note=note)

    # onnxruntime --------------------------------------------------------------------------------------
    def _onnx_path(self) -> Path:
        path = self.workdir / "fp32.onnx"
        if not path.exists():
            art.export_onnx(self.reference, "cpu", path, self.cfg.max_batch, self.cfg.max_seq)
        return path

    def _onnx_plans(self) -> Iterator[Plan]:
        yield Plan("onnxruntime fp32", _timed(lambda: _onnx_variant("onnxruntime fp32", "fp32", self._onnx_path())))

        def build_int8(name: str, threads: int, reduce_range: bool = False) -> Variant:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            out = self.workdir / f"int8-dynamic-perchannel{'-reduce-range' if reduce_range else ''}.onnx"
            if not out.exists():
                quantize_dynamic(
                    str(self._onnx_path()),
                    str(out),
                    per_channel=True,
                    reduce_range=reduce_range,
                    weight_type=QuantType.QInt8,
                )
            return _onnx_variant(name, "int8", out, threads)

        name = "onnxruntime int8 dynamic per-channel"
        yield Plan(name, _timed(functools.partial(build_int8, name, torch.get_num_threads())))
        if torch.get_num_threads() > 1:  # at batch 1 onnxruntime's int8 can be faster on one thread
            name_1t = f"{name}, 1 thread"
            yield Plan(name_1t, _timed(functools.partial(build_int8, name_1t, 1)))
        # 7-bit weights: the quantizer's setting for CPUs without VNNI, where 8-bit products can saturate
        name_rr = f"{name}, reduce_range"
        yield Plan(name_rr, _timed(functools.partial(build_int8, name_rr, torch.get_num_threads(), True)))


def _onnx_variant(name: str, precision: str, path: Path, threads: int = 0) -> Variant:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads or torch.get_num_threads()
    # Idle pool threads would otherwise spin after each run and steal the cores from the next variant.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

    def prepare(ids: torch.Tensor, mask: torch.Tensor) -> dict[str, Any]:
        return {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}

    return Variant(
        name,
        precision,
        lambda feeds: session.run(["embedding"], feeds)[0],
        prepare,
        torch.from_numpy,
        note=f"onnxruntime {ort.__version__}, {opts.intra_op_num_threads} threads",
    )


def _manifest_for(path: Path) -> dict[str, Any]:
    """The minimal manifest :class:`serving.python_backend.runtime.Runtime` needs for a package built here."""
    from serving.contract.manifest import sha256

    return {
        "runtime": AOTI,
        "artifacts": {AOTI: {"file": path.name}},
        "files": {path.name: {"bytes": path.stat().st_size, "sha256": sha256(path)}},
    }


def _runtime_variant(name: str, precision: str, model_dir: Path, manifest: dict[str, Any], device: str) -> Variant:
    """The serving runtime as the Triton model runs it: numpy in, one CUDA graph per shape, numpy out."""
    from serving.python_backend.runtime import Runtime

    runtime = Runtime(model_dir, manifest, device)

    def prepare(ids: torch.Tensor, mask: torch.Tensor) -> tuple[Any, Any]:
        return ids.numpy(), mask.numpy()

    return Variant(
        name,
        precision,
        lambda args: runtime(*args),
        prepare,
        lambda out: torch.from_numpy(out).float(),
        note="numpy in/out, host-device copies included",
    )
