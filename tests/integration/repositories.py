"""The repositories the integration tier serves: each exported into build/, and again whenever the export or serving
code changed (the index's ``code_sha256`` says which code wrote it).

    python -m tests.integration.repositories

exports the stale ones, one after another, outside pytest (to have them ready before a run of the integration tier).
A fixture that finds its repository stale exports it itself, and a failed export fails the test with the end of the
export's log.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from export.repository import code_sha256

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
MAX_SEQ = 128  # the task and several-model repositories'
EXPORT_LOG_LINES = 40

log = logging.getLogger(__name__)


class ExportFailed(RuntimeError):
    """An export that exited non-zero; the message holds the end of its log."""


@dataclass(frozen=True)
class RepositoryExport:
    """One repository the integration tier serves: its directory under build/ and the export that writes it."""

    name: str
    options: tuple[str, ...] = ()  # python -m export's, --output aside
    prepare: Callable[[], object] | None = None  # what the export reads, written first (a seeded checkpoint)
    max_batch: int = 32  # --max-batch (export's default unless options say otherwise)

    @property
    def path(self) -> Path:
        return BUILD / self.name

    def fresh(self) -> bool:
        index = self.path / "repository.json"
        return index.is_file() and json.loads(index.read_text()).get("code_sha256") == code_sha256()

    def exported(self) -> Path:
        """The repository, exported first when stale; its output goes to build/<name>.export.log."""
        if self.fresh():
            return self.path
        if self.prepare is not None:
            self.prepare()
        log_path = BUILD / f"{self.name}.export.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "export", *self.options, "--output", str(self.path)]
        with log_path.open("wb") as out:
            done = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            lines = re.split(r"[\r\n]+", log_path.read_text(errors="replace"))
            tail = "\n".join(line for line in lines[-EXPORT_LOG_LINES:] if line.strip())
            raise ExportFailed(
                f"export {' '.join(self.options)} exited {done.returncode}; the end of {log_path}:\n{tail}"
            )
        return self.path


def task(
    name: str, task_name: str, max_batch: int, *options: str, prepare: Callable[[], object] | None = None
) -> RepositoryExport:
    """A single-task export of one checkpoint; fp32 unless ``options`` say otherwise (--precision ...)."""
    common = ("--task", task_name, "--max-batch", str(max_batch), "--max-seq", str(MAX_SEQ))
    return RepositoryExport(name, (*common, *(options or ("--precision", "fp32"))), prepare, max_batch)


def several(name: str, specs: tuple[str, ...], max_batch: int = 8) -> RepositoryExport:
    """Several checkpoints (``--model NAME=SPEC`` each) in one repository; untuned and without ONNX, to keep the
    tests' exports short."""
    models = tuple(a for s in specs for a in ("--model", s))
    options = (*models, "--max-batch", str(max_batch), "--max-seq", str(MAX_SEQ), "--no-autotune", "--skip", "onnx")
    return RepositoryExport(name, options, max_batch=max_batch)


RERANK_INT8_CHECKPOINT = BUILD / "test-rerank-int8-checkpoint"
RERANK_INT8_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}


def seeded_reranker(path: Path = RERANK_INT8_CHECKPOINT, seed: int = 0) -> Path:
    """A small BertForSequenceClassification with one label, seeded, saved with MiniLM's tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from export.checkpoint import minilm_path

    torch.manual_seed(seed)
    config = BertConfig(**RERANK_INT8_SHAPE, max_position_embeddings=MAX_SEQ, num_labels=1)
    model = BertForSequenceClassification(config)
    model.config.architectures = ["BertForSequenceClassification"]
    model.save_pretrained(str(path))
    AutoTokenizer.from_pretrained(str(minilm_path())).save_pretrained(str(path))
    return path


# The real default model (MiniLM, CPU, fp32 + int8), exported end to end as `make export` does.
DEFAULT = RepositoryExport("test-repository")
RERANK = task("test-rerank-repository", "rerank", 8)
CLASSIFY = task("test-classify-repository", "classify", 8)
RERANK_INT8 = task("test-rerank-int8-repository", "rerank", 32, "--model", str(RERANK_INT8_CHECKPOINT), "--precision",
                   "fp32,int8", "--serve", "int8", prepare=seeded_reranker)  # fmt: skip
TWO_MODELS = several(
    "test-two-models-repository",
    ("embed=minilm,precision=fp32", "rerank=minilm-cross-encoder,task=rerank,precision=fp32"),
)
ROUTES = several(
    "test-routes-repository",
    (
        "docs=minilm,precision=fp32",
        "ranker=minilm-cross-encoder,task=rerank,precision=fp32",
        "labels=minilm-classifier,task=classify,precision=fp32",
    ),
)
ALL = (DEFAULT, ROUTES, TWO_MODELS, RERANK_INT8, CLASSIFY, RERANK)


def main() -> int:
    """Exports every stale repository; an export that fails is left to its tests, which fail with its log."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    given = os.environ.get("BERTSERVE_TEST_REPOSITORY")  # the tests use that one instead of DEFAULT
    for repo in [r for r in ALL if not (given and r is DEFAULT)]:
        start = time.monotonic()
        try:
            fresh = repo.fresh()
            repo.exported()
            log.info("%s: %s", repo.name, "fresh" if fresh else f"exported in {time.monotonic() - start:.0f} s")
        except ExportFailed as e:
            log.error("%s: %s", repo.name, str(e).splitlines()[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
