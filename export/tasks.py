"""What a checkpoint is exported for: the task notion on the export side.

- ``embed``: a sentence embedder (BertModel, mean pooling, L2 norm): text in, one vector out (export/pipeline.py).
- ``rerank``: a cross-encoder (BertForSequenceClassification with one label): a query and N documents in, one
  score per document out (export/rerank.py).
- ``classify``: a sequence classifier (BertForSequenceClassification with an id2label of several labels): texts
  (or text pairs) in, logits, probabilities and the label out (export/classify.py, through export/rerank.py's
  path: both are a sequence classifier, rerank the one-label case).

The task comes from ``--task`` or, without it, from the checkpoint's config.json. Each task's int8 is gated on what
its users see against fp32: embed on retrieval (export/verify.py), rerank on the order of shipped lists, classify on
labels (export/sequence_gates.py).

A new task touches the list in backend/README.md's "Tasks" section.
"""

from __future__ import annotations

import json
from pathlib import Path

from export.errors import CheckpointError, ConfigError

TASKS = ("embed", "rerank", "classify")
# The seeded checkpoints export builds when no real one is given (export/cross_encoder.py).
SEEDED_CROSS_ENCODER = "minilm-cross-encoder"
SEEDED_CLASSIFIER = "minilm-classifier"
CROSS_ENCODER_ARCHITECTURE = "BertForSequenceClassification"


def _config(path: Path) -> dict:
    try:
        return json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"cannot read {path / 'config.json'}: {e}") from e


def labels(path: Path) -> dict[int, str]:
    """The checkpoint's id2label. Without one, ``num_labels`` LABEL_i, else transformers' default of two labels
    (its config omits id2label when it is the default)."""
    config = _config(path)
    id2label = config.get("id2label")
    if not id2label:
        id2label = {str(i): f"LABEL_{i}" for i in range(int(config.get("num_labels") or 2))}
    return {int(k): v for k, v in id2label.items()}


def detect(path: Path) -> str:
    """``rerank`` for a sequence classifier with one label, ``classify`` with several; ``embed`` for anything else."""
    config = _config(path)
    if CROSS_ENCODER_ARCHITECTURE in (config.get("architectures") or []):
        return "rerank" if len(labels(path)) == 1 else "classify"
    return "embed"


def check(task: str, path: Path) -> None:
    """The checkpoint can be exported for ``task``, or a ConfigError that says why not."""
    config = _config(path)
    if task not in ("rerank", "classify"):
        return
    if CROSS_ENCODER_ARCHITECTURE not in (config.get("architectures") or []):
        what = "a cross-encoder" if task == "rerank" else "a sequence classifier"
        raise ConfigError(
            f"--task {task} needs a {CROSS_ENCODER_ARCHITECTURE} checkpoint ({what}); {path} declares "
            f"{config.get('architectures')}"
        )
    n = len(labels(path))
    if task == "rerank" and n != 1:
        raise ConfigError(f"--task rerank needs one label (a relevance score); {path} has {n} (classify)")
    if task == "classify" and n < 2:
        raise ConfigError(f"--task classify needs two labels or more in id2label; {path} has {n} (rerank)")
    if task == "classify" and config.get("problem_type") == "multi_label_classification":
        raise ConfigError(
            f"--task classify serves single-label classifiers (softmax over the labels); {path} is "
            "multi_label_classification"
        )
