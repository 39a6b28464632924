"""What a checkpoint is exported for: the task notion on the export side.

- ``embed``: a sentence embedder (BertModel, mean pooling, L2 norm): text in, one vector out (export/pipeline.py).
- ``rerank``: a cross-encoder (BertForSequenceClassification with one label): a query and N documents in, one
  score per document out (export/rerank.py).

The task comes from ``--task`` or, without it, from the checkpoint's config.json.
"""

from __future__ import annotations

import json
from pathlib import Path

from export.errors import CheckpointError, ConfigError

TASKS = ("embed", "rerank")
# The seeded cross-encoder export builds when no real one is given (export/cross_encoder.py).
SEEDED_CROSS_ENCODER = "minilm-cross-encoder"
CROSS_ENCODER_ARCHITECTURE = "BertForSequenceClassification"


def _config(path: Path) -> dict:
    try:
        return json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"cannot read {path / 'config.json'}: {e}") from e


def labels(path: Path) -> dict[int, str]:
    """The checkpoint's id2label (one label when it declares none)."""
    config = _config(path)
    id2label = config.get("id2label") or {"0": "LABEL_0"}
    if config.get("num_labels") and not config.get("id2label"):
        id2label = {str(i): f"LABEL_{i}" for i in range(int(config["num_labels"]))}
    return {int(k): v for k, v in id2label.items()}


def detect(path: Path) -> str:
    """``rerank`` for a sequence classifier with one label; ``embed`` for anything else."""
    config = _config(path)
    if CROSS_ENCODER_ARCHITECTURE in (config.get("architectures") or []) and len(labels(path)) == 1:
        return "rerank"
    return "embed"


def check(task: str, path: Path) -> None:
    """The checkpoint can be exported for ``task``, or a ConfigError that says why not."""
    config = _config(path)
    if task == "rerank":
        if CROSS_ENCODER_ARCHITECTURE not in (config.get("architectures") or []):
            raise ConfigError(
                f"--task rerank needs a {CROSS_ENCODER_ARCHITECTURE} checkpoint (a cross-encoder); {path} declares "
                f"{config.get('architectures')}"
            )
        if (n := len(labels(path))) != 1:
            raise ConfigError(f"--task rerank needs one label (a relevance score); {path} has {n} (classify)")
