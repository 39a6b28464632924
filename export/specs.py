"""Several checkpoints in one model repository: ``--model NAME=SPEC``, once per model.

    NAME=CHECKPOINT[,KEY=VALUE]...

NAME is the model clients call (an embedder ``embed`` beside a reranker ``rerank`` is the usual retrieval stack).
CHECKPOINT is what a plain ``--model`` takes: ``minilm``, ``bert-base``, ``minilm-cross-encoder`` or a local Hugging
Face directory (one without commas or white space). Each KEY=VALUE sets one of that model's own options:

- ``task``: embed, rerank or classify (default: from the checkpoint, as ``--task``);
- ``precision``: the precisions to export, joined by ``+`` (``fp32+int8``), each gated as ``--precision`` is;
- ``serve``, ``max_seq``, ``max_batch``, ``instances``, ``int8_recipe``: as the options of those names.

A spec without ``precision`` takes ``--precision`` (by default the target's). Everything else (``--target``, ``--threads``, ``--output``, the queue and deadline settings, ...) is the
repository's, shared by every model: above all ``--threads``, since the native backend runs every model's CPU
forwards on one pool per thread count (backend/src/compute_pool.h), and only one thread count keeps the pools from
outnumbering the cores.

An embedder's companion models (its ``bert``, ``bert_<precision>``, ``tokenizer``, ``bert_torchscript``) take
NAME as a prefix (``NAME_bert``, ...), except for an embedder named ``embed``, whose companions keep the names of
a single-model repository. Every model name in the repository must be distinct.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass

from common import options
from export.errors import ConfigError

# The model a single-model export's task is served as; a spec of that name keeps the companions' plain names.
DEFAULT_ENTRY = {"embed": "embed", "rerank": "rerank", "classify": "classify"}
# The model's own options a spec may set: the spec's key -> the ExportConfig field.
KEYS = {
    "task": "task",
    "precision": "precisions",
    "serve": "serve",
    "max_seq": "max_seq",
    "max_batch": "max_batch",
    "instances": "instances",
    "int8_recipe": "int8_recipe",
}
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,63}")


@dataclass(frozen=True)
class ModelSpec:
    name: str  # the model clients call
    checkpoint: str
    settings: tuple[tuple[str, str], ...] = ()  # (KEY, VALUE) as given
    text: str = ""  # the spec as given, for the repository's index and messages


@dataclass(frozen=True)
class ModelNames:
    """The names one exported checkpoint's models take in the repository."""

    entry: str  # the model clients call: embed, rerank or the spec's NAME
    prefix: str = ""  # of an embedder's companions

    @property
    def bert(self) -> str:
        return f"{self.prefix}bert"

    @property
    def tokenizer(self) -> str:
        return f"{self.prefix}tokenizer"

    @property
    def torchscript(self) -> str:
        return f"{self.prefix}bert_torchscript"

    def staging(self, precision: str) -> str:
        return f"{self.prefix}bert_{precision}"

    def planned(self, task: str, precisions: tuple[str, ...]) -> list[str]:
        """Every name the export may write for this checkpoint (a precision's model is ``bert`` or its own)."""
        if task != "embed":
            return [self.entry]
        return [self.entry, self.bert, self.tokenizer, self.torchscript, *(self.staging(p) for p in precisions)]


SINGLE = {task: ModelNames(entry) for task, entry in DEFAULT_ENTRY.items()}


def names_for(name: str, task: str) -> ModelNames:
    return ModelNames(name, "" if name == DEFAULT_ENTRY[task] else f"{name}_")


def is_named(text: str) -> bool:
    """``NAME=SPEC`` rather than a plain checkpoint: text before the first '=' that holds no path separator."""
    head, eq, _ = text.partition("=")
    return bool(eq) and "/" not in head and "," not in head


def parse(text: str) -> ModelSpec:
    """One ``NAME=CHECKPOINT[,KEY=VALUE]...``; ConfigError saying what is wrong with it."""
    where = f"--model {text!r}"
    name, eq, rest = text.partition("=")
    if not eq:
        raise ConfigError(f"{where}: expected NAME=CHECKPOINT[,KEY=VALUE]...")
    if not NAME_PATTERN.fullmatch(name):
        raise ConfigError(
            f"{where}: the model name {name!r} must start with a lower-case letter and hold only a-z, 0-9, _ and - "
            "(at most 64 characters)"
        )
    checkpoint, *pairs = (part.strip() for part in rest.split(","))
    if not checkpoint or "=" in checkpoint:
        raise ConfigError(f"{where}: the checkpoint comes first after NAME= (minilm, bert-base, ... or a directory)")
    settings: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not value:
            raise ConfigError(f"{where}: {pair!r} is not KEY=VALUE")
        if key not in KEYS:
            raise ConfigError(f"{where}: unknown key {key!r}; a spec may set {', '.join(KEYS)}")
        if key in settings:
            raise ConfigError(f"{where}: {key} is given twice")
        settings[key] = value
    return ModelSpec(name, checkpoint, tuple(settings.items()), text)


def parse_all(texts: tuple[str, ...]) -> tuple[ModelSpec, ...]:
    """Every ``--model``: all NAME=SPEC (or one plain checkpoint, which is no spec: returns ()); names distinct."""
    named = [is_named(t) for t in texts]
    if not any(named):
        if len(texts) > 1:
            raise ConfigError(f"--model given {len(texts)} times: several models need NAME=CHECKPOINT each")
        return ()
    if not all(named):
        plain = next(t for t, n in zip(texts, named, strict=True) if not n)
        raise ConfigError(f"--model {plain!r} has no NAME=: with several models each needs one (NAME=CHECKPOINT)")
    specs = tuple(parse(t) for t in texts)
    seen: set[str] = set()
    for s in specs:
        if s.name in seen:
            raise ConfigError(f"two --model specs are named {s.name!r}: each model needs its own name")
        seen.add(s.name)
    return specs


def apply(cfg: typing.Any, spec: ModelSpec) -> typing.Any:
    """The repository's ExportConfig with the spec's checkpoint and own options: the config its model is exported
    with (checked as the command line's is)."""
    hints = typing.get_type_hints(type(cfg))
    changes: dict[str, typing.Any] = {"model": (spec.checkpoint,)}
    for key, text in spec.settings:
        field = KEYS[key]
        try:
            changes[field] = options.value(hints[field], text.replace("+", ",") if key == "precision" else text)
        except ValueError as e:
            raise ConfigError(f"--model {spec.name}=...: {key}={text!r}: {e}") from e
    try:
        return dataclasses.replace(cfg, **changes)
    except ConfigError as e:
        raise ConfigError(f"--model {spec.name}=...: {e}") from e


def check_distinct(planned: dict[str, list[str]]) -> None:
    """Spec name -> the model names it will write; ConfigError naming the first name two specs would share."""
    owner: dict[str, str] = {}
    for spec, names in planned.items():
        for n in names:
            if n in owner and owner[n] != spec:
                raise ConfigError(
                    f"--model {spec}=... and --model {owner[n]}=... would both write a model named {n!r}: rename one"
                )
            owner[n] = spec
