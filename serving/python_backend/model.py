"""What the project's Python-backend models share: metrics closed on unload, error responses counted by reason."""

from __future__ import annotations

from typing import Any

from serving.python_backend.errors import RequestError, to_triton_error
from serving.python_backend.metrics import ModelMetrics


class StubModel:
    """Base of a ``TritonPythonModel``; the model sets ``pb_utils`` (the stub's module) and ``metrics``."""

    pb_utils: Any
    metrics: ModelMetrics

    def finalize(self) -> None:
        self.metrics.close()

    def error_response(self, error: RequestError) -> Any:
        """That request's error (status by failure class), counted under its reason."""
        self.metrics.failures[error.reason].increment(1)
        return self.pb_utils.InferenceResponse(error=to_triton_error(self.pb_utils, error))
