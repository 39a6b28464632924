"""Failure classes of the models, each mapped once to a Triton error code (hence gRPC and HTTP status)."""

from __future__ import annotations

from typing import Any


class RequestError(Exception):
    """A request the model rejects; ``reason`` labels the failure counter."""

    code_name = "INVALID_ARG"  # gRPC INVALID_ARGUMENT / HTTP 400

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class InternalError(RequestError):
    code_name = "INTERNAL"  # gRPC INTERNAL / HTTP 500

    def __init__(self, message: str) -> None:
        super().__init__("internal", message)


def to_triton_error(pb_utils: Any, error: RequestError) -> Any:
    return pb_utils.TritonError(str(error), getattr(pb_utils.TritonError, error.code_name))
