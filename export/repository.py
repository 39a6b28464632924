"""Write the Triton model repository into a temporary directory and swap it in only when complete."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from export.errors import OutputDirError
from export.model_configs import render
from serving.contract.manifest import MANIFEST, REPOSITORY_INDEX, sha256

log = logging.getLogger(__name__)

README_TEXT = (
    "Build output of `make export`: the Triton model repository (tokenizer, bert, embed, ...). "
    "Nothing here is committed.\n"
)
SERVING_MODELS = Path(__file__).resolve().parent.parent / "serving" / "python_backend" / "models"


def code_sha256() -> str:
    """One hash over the export and serving code: a repository built by other code is stale."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent
    for p in sorted([*root.glob("export/**/*.py"), *root.glob("export/data/*"), *root.glob("serving/**/*.py")]):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def file_hashes(model_dir: Path) -> dict[str, dict[str, Any]]:
    """sha256 and size of every file of a model (symlinks followed), the manifest itself excluded."""
    out = {}
    for p in sorted(model_dir.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            out[p.relative_to(model_dir).as_posix()] = {"sha256": sha256(p), "bytes": p.stat().st_size}
    return out


def serialize_strings(texts: list[str]) -> bytes:
    """Triton's raw TYPE_STRING layout: 4-byte little-endian length, then the bytes, per element."""
    out = b""
    for t in texts:
        b = t.encode("utf-8")
        out += struct.pack("<I", len(b)) + b
    return out


class RepositoryWriter:
    def __init__(self, output: Path) -> None:
        self.output = output.resolve()
        parent = self.output.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.output.name}.", dir=parent))
        except OSError as e:
            raise OutputDirError(f"cannot write the model repository under {parent}: {e}") from e
        if self.output.exists() and not os.access(self.output, os.W_OK):
            raise OutputDirError(f"{self.output} is not writable")
        (self.tmp / "README.md").write_text(README_TEXT)

    def version_dir(self, model: str) -> Path:
        d = self.tmp / model / "1"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def write_config(self, model: str, config: dict[str, Any]) -> None:
        self.version_dir(model)
        (self.tmp / model / "config.pbtxt").write_text(render(config))

    def copy_model_code(self, model: str, source: str) -> None:
        shutil.copyfile(SERVING_MODELS / source, self.version_dir(model) / "model.py")

    def write_warmup(self, model: str, files: dict[str, bytes | np.ndarray]) -> None:
        d = self.tmp / model / "warmup"
        d.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (d / name).write_bytes(data if isinstance(data, bytes) else np.ascontiguousarray(data).tobytes())

    def link(self, model: str, filename: str, target_model: str, target_file: str) -> None:
        """A relative symlink, so a model for another backend shares an artifact without a copy."""
        dst = self.version_dir(model) / filename
        dst.symlink_to(Path("..") / ".." / target_model / "1" / target_file)

    def write_manifest(self, model: str, manifest: dict[str, Any]) -> dict[str, Any]:
        model_dir = self.tmp / model
        manifest = {**manifest, "files": file_hashes(model_dir)}
        (model_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        return manifest

    def write_index(self, index: dict[str, Any]) -> None:
        index = {**index, "code_sha256": code_sha256()}
        (self.tmp / REPOSITORY_INDEX).write_text(json.dumps(index, indent=2) + "\n")

    def commit(self) -> Path:
        """Swap the finished repository in; the previous one is removed only after the swap."""
        old = None
        if self.output.exists():
            old = self.output.with_name(f".{self.output.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            self.output.rename(old)
        self.tmp.rename(self.output)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        log.info("model repository written to %s", self.output)
        return self.output

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
