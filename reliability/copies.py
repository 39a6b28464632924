"""Copies of an exported repository for fault runs: hard-linked (cheap), a file replaced rather than written into."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from google.protobuf import json_format

from export.model_configs import TOKENIZER_INPUTS, TOKENIZER_OUTPUTS, QueuePolicy, parse, queue_policy, render
from export.repository import SERVING_MODELS, file_hashes
from serving.contract import native
from serving.contract.manifest import MANIFEST, REPOSITORY_INDEX, sha256

# The models that shed: bert, and embed where it is one native model (an ensemble's steps shed, not the ensemble);
# the tokenizer takes no queue policy (export/model_configs.py).
SHEDDING_MODELS = ("embed", "bert")


def linked_copy(src: Path, dst: Path) -> Path:
    """dst as a tree of hard links to src (a plain copy across file systems)."""

    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, copy_function=link, symlinks=True)
    return dst


def replace_file(path: Path, data: bytes) -> None:
    """Write by replacing the directory entry, so that a hard-linked original is left as it was."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def rewrite_config(model_dir: Path, policy: QueuePolicy) -> None:
    """Set the model's shedding (Triton's queue policy, or the native backend's default deadline, which admits by
    queued work rather than by count) through the config generator and record the new hash in its manifest."""
    config = json_format.MessageToDict(
        parse((model_dir / "config.pbtxt").read_text()), preserving_proto_field_name=True
    )
    if config["backend"] == native.NAME:  # admission by work: the policy's timeout is the default deadline
        config["parameters"]["deadline_us"] = {"string_value": str(policy.timeout_us)}
    else:
        config.setdefault("dynamic_batching", {})["default_queue_policy"] = queue_policy(policy)
    replace_file(model_dir / "config.pbtxt", render(config).encode())
    record_config(model_dir)


def set_parameter(model_dir: Path, key: str, value: str) -> None:
    """One of the model's config parameters set (e.g. the native queue's `queue_order`), recorded in its manifest."""
    config = json_format.MessageToDict(
        parse((model_dir / "config.pbtxt").read_text()), preserving_proto_field_name=True
    )
    config.setdefault("parameters", {})[key] = {"string_value": value}
    replace_file(model_dir / "config.pbtxt", render(config).encode())
    record_config(model_dir)


def set_native_parameter(repo: Path, key: str, value: str) -> None:
    """The parameter set on every model of the native backend in ``repo`` (a copy: see linked_copy)."""
    for config in sorted(repo.glob("*/config.pbtxt")):
        if f'backend: "{native.NAME}"' in config.read_text():
            set_parameter(config.parent, key, value)


def record_config(model_dir: Path) -> None:
    """Record the model's edited config.pbtxt in its manifest: the launcher loads no model whose files differ."""
    manifest = json.loads((model_dir / MANIFEST).read_text())
    path = model_dir / "config.pbtxt"
    manifest["files"]["config.pbtxt"] = {"sha256": sha256(path), "bytes": path.stat().st_size}
    replace_file(model_dir / MANIFEST, json.dumps(manifest, indent=2).encode())


def python_tokenizer_copy(src: Path, dst: Path) -> Path:
    """A linked copy of src whose `tokenizer` runs in a Python-backend stub, as export writes it where the native
    tokenizer cannot reproduce the checkpoint's, text pairs included: the stub-death runs need a stub to kill."""
    linked_copy(src, dst)
    model_dir = dst / "tokenizer"
    config = json_format.MessageToDict(
        parse((model_dir / "config.pbtxt").read_text()), preserving_proto_field_name=True
    )
    if config["backend"] == "python":
        return dst
    config["backend"] = "python"
    config["input"], config["output"] = TOKENIZER_INPUTS, TOKENIZER_OUTPUTS  # text pairs too
    config["parameters"]["EXECUTION_ENV_PATH"] = {"string_value": sys.prefix}
    replace_file(model_dir / "config.pbtxt", render(config).encode())
    shutil.copyfile(SERVING_MODELS / "tokenizer.py", model_dir / "1" / "model.py")
    manifest = json.loads((model_dir / MANIFEST).read_text())
    manifest = {k: v for k, v in manifest.items() if k not in ("runtime", "tokenizer")}
    replace_file(model_dir / MANIFEST, json.dumps({**manifest, "files": file_hashes(model_dir)}, indent=2).encode())
    index = json.loads((dst / REPOSITORY_INDEX).read_text())
    index["models"]["tokenizer"]["backend"] = "python"
    replace_file(dst / REPOSITORY_INDEX, json.dumps(index, indent=2).encode())
    return dst


def shedding_copy(src: Path, dst: Path, policy: QueuePolicy | None) -> Path:
    """A linked copy of src; with a policy, the configs of the models that shed carry it instead of the exported
    one."""
    linked_copy(src, dst)
    if policy is not None:
        for name in SHEDDING_MODELS:
            config = dst / name / "config.pbtxt"
            if config.is_file() and 'platform: "ensemble"' not in config.read_text():
                rewrite_config(dst / name, policy)
    return dst
