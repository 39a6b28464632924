"""Typed export errors: each stops the pipeline with a message naming what was wrong."""


class ExportError(Exception):
    """Base class: the export cannot go on."""


class ConfigError(ExportError):
    """A flag or option is invalid (unknown precision, fp16 on CPU, --max-seq too long, ...)."""


class CheckpointError(ExportError):
    """The checkpoint is missing, unreadable or not a BERT model."""


class OutputDirError(ExportError):
    """The output directory cannot be written."""


class ArtifactError(ExportError):
    """An artifact could not be produced or loaded back."""


class AccuracyGateError(ExportError):
    """An artifact's accuracy against the eager fp32 model is below its gate."""

    def __init__(self, artifact: str, metric: str, value: float, gate: float) -> None:
        super().__init__(f"{artifact}: {metric} {value:.5f} is below the gate {gate}")
        self.artifact, self.metric, self.value, self.gate = artifact, metric, value, gate
