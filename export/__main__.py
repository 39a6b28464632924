"""``python -m export``: run the export pipeline; a clear message and exit 1 on any export error."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from export.config import parse_args
from export.errors import ExportError
from export.quiet import quiet_third_parties


def _task(cfg) -> str:
    """--task, else what the checkpoint is (a named spec other than a seeded classifier's is an embedder)."""
    from export import tasks

    if cfg.task:
        return cfg.task
    if cfg.checkpoint == tasks.SEEDED_CROSS_ENCODER:
        return "rerank"
    if cfg.checkpoint == tasks.SEEDED_CLASSIFIER:
        return "classify"
    path = Path(cfg.checkpoint).expanduser()
    return tasks.detect(path) if (path / "config.json").is_file() else "embed"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_third_parties()
    try:
        cfg = parse_args(argv)
        if cfg.specs:
            from export import several

            several.run(cfg, _task)
            return 0
        task = _task(cfg)
        if task == "rerank":
            from export.rerank import run  # heavy imports after the arguments are known good
        elif task == "classify":
            from export.classify import run
        else:
            from export.pipeline import run
        run(cfg)
    except ExportError as e:
        logging.getLogger("export").error("export failed: %s: %s", type(e).__name__, e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
