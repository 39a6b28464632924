"""Several checkpoints into one model repository (``--model NAME=SPEC``, once per model; export/specs.py).

Each spec is exported as a single-model export would be, with its own task, precisions and gates, under its own
names, into one repository that is swapped in only when every model is complete: a gate that fails for one model
fails the export and leaves the previous repository as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from export import specs, tasks
from export.config import ExportConfig
from export.errors import CheckpointError
from export.repository import RepositoryWriter

log = logging.getLogger(__name__)
# The checkpoints export builds or ships itself (export/checkpoint.py, export/cross_encoder.py).
NAMED_CHECKPOINTS = ("minilm", "bert-base", tasks.SEEDED_CROSS_ENCODER, tasks.SEEDED_CLASSIFIER)


def plan(cfg: ExportConfig, task_of: Callable[[ExportConfig], str]) -> list[tuple[specs.ModelSpec, ExportConfig, str]]:
    """(spec, its config, its task) for every spec, checked before anything is built: each spec's options, and
    every model name distinct across the repository."""
    planned = []
    for spec in cfg.specs:
        if (
            spec.checkpoint not in NAMED_CHECKPOINTS
            and not (Path(spec.checkpoint).expanduser() / "config.json").is_file()
        ):
            raise CheckpointError(
                f"--model {spec.name}=...: {spec.checkpoint} is neither {', '.join(NAMED_CHECKPOINTS)} nor a local "
                "Hugging Face directory (no config.json)"
            )
        model_cfg = specs.apply(cfg, spec)
        task = model_cfg.task or task_of(model_cfg)
        planned.append((spec, model_cfg, task))
    specs.check_distinct({s.name: specs.names_for(s.name, task).planned(task, c.precisions) for s, c, task in planned})
    return planned


def run(cfg: ExportConfig, task_of: Callable[[ExportConfig], str]) -> Path:
    planned = plan(cfg, task_of)
    log.info("export config: %s", cfg)
    log.info("models: %s", ", ".join(f"{s.name} ({task}: {s.checkpoint})" for s, _, task in planned))
    writer = RepositoryWriter(cfg.output)
    try:
        parts = {}
        for spec, model_cfg, task in planned:
            log.info("exporting %s: %s", spec.name, spec.text)
            names = specs.names_for(spec.name, task)
            if task in ("rerank", "classify"):
                from export import classify, rerank

                sequence_task = classify.CLASSIFY if task == "classify" else rerank.RERANK
                parts[spec.name] = rerank.export_into(model_cfg, writer, names.entry, sequence_task)
            else:
                from export import pipeline

                parts[spec.name] = pipeline.export_into(model_cfg, writer, names)
        writer.write_index(merged_index(cfg, planned, parts))
        return writer.commit()
    except BaseException:
        writer.abort()
        raise


def merged_index(cfg: ExportConfig, planned: list, parts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One repository index over every model: what the launcher reads (target, models and their backends and
    tasks, ensembles) and, per spec, what its own index said (source, shapes, the precision its bert serves)."""
    index: dict[str, Any] = {
        "target": cfg.target,
        "torch": next(iter(parts.values()))["torch"],
        "models": {},
        "ensemble_requires": {},
        "served": {},
        "specs": {},
    }
    for spec, _, task in planned:
        part = parts[spec.name]
        index["models"].update(part["models"])
        index["ensemble_requires"].update(part["ensemble_requires"])
        index["served"].update(part.get("served", {}))
        index["specs"][spec.name] = {
            "spec": spec.text,
            "task": task,
            **{k: v for k, v in part.items() if k not in ("models", "ensemble_requires", "served", "target", "torch")},
        }
    return index
