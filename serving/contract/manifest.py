"""Read a model's manifest.json and verify files against the sha256 it records; the repository index's entry
points."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path, PurePosixPath
from typing import Any

MANIFEST = "manifest.json"
REPOSITORY_INDEX = "repository.json"


class VerificationError(Exception):
    """A file is missing or its sha256 differs from the manifest's."""


def read(model_dir: Path) -> dict[str, Any]:
    path = model_dir / MANIFEST
    if not path.is_file():
        raise VerificationError(f"{path} is missing: the model was not exported")
    return json.loads(path.read_text())


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_inside(model_dir: Path, rel: str) -> None:
    """A file the manifest names lies inside the model's directory: absolute paths and ``..`` are refused, or a
    manifest could point the server at any file it can read."""
    path = PurePosixPath(rel)
    if not rel or path.is_absolute() or "\\" in rel or ".." in path.parts:
        raise VerificationError(
            f"{model_dir.name}: {MANIFEST} names {rel!r}; a file must be a relative path inside the model's "
            "directory (no leading /, no ..)"
        )


def verify(model_dir: Path, manifest: dict[str, Any], only: list[str] | None = None) -> None:
    """Raise VerificationError naming the first file that is missing, differs or lies outside ``model_dir``."""
    files = manifest.get("files", {})
    for rel in only if only is not None else files:
        check_inside(model_dir, rel)
        if rel not in files:
            raise VerificationError(f"{model_dir.name}: {rel} is not listed in {MANIFEST}")
        path = model_dir / rel
        if not path.is_file():
            raise VerificationError(f"{model_dir.name}: {path} is missing")
        if path.stat().st_size != files[rel]["bytes"] or sha256(path) != files[rel]["sha256"]:
            raise VerificationError(f"{model_dir.name}: {path} does not match its sha256 in {MANIFEST}")


def entry_points(index: dict[str, Any]) -> dict[str, str]:
    """The models clients call, by name, with their task (``embed``, ``rerank``): those the repository index
    (repository.json) gives a task; an index written before tasks were recorded has its one embedder, ``embed``."""
    tasks = {name: spec["task"] for name, spec in index["models"].items() if spec.get("task")}
    return tasks or {name: "embed" for name in index["models"] if name == "embed"}
