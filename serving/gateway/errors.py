"""One error type per failure class, each mapped once to its HTTP status, OpenAI's error ``type`` and TEI's
``error_type``; ``from_grpc`` maps tritonserver's answers onto them."""

from __future__ import annotations

import grpc

RETRY_AFTER_S = 1  # what a 429 asks the client to wait


class GatewayError(Exception):
    status = 500
    tei_status = 424  # TEI: the backend failed
    openai_type = "server_error"
    tei_type = "backend"
    code: str | None = None

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param = message, param

    @property
    def headers(self) -> dict[str, str]:
        return {}

    def openai(self) -> dict:
        return {"error": {"message": self.message, "type": self.openai_type, "param": self.param, "code": self.code}}

    def tei(self) -> dict:
        return {"error": self.message, "error_type": self.tei_type}


class BadRequest(GatewayError):
    """The request itself is wrong: a schema violation, an empty or too long text, a bad token id (TEI answers
    these with 422 Unprocessable Entity)."""

    status = 400
    tei_status = 422
    openai_type = "invalid_request_error"
    tei_type = "validation"


class Unauthorized(GatewayError):
    status = 401
    tei_status = 401
    openai_type = "invalid_request_error"
    tei_type = "unauthorized"
    code = "invalid_api_key"


class ModelNotFound(GatewayError):
    status = 404
    tei_status = 404
    openai_type = "invalid_request_error"
    tei_type = "validation"
    code = "model_not_found"


class TooLarge(GatewayError):
    status = 413
    tei_status = 413
    openai_type = "invalid_request_error"
    tei_type = "payload_limit"


class Overloaded(GatewayError):
    """The server shed the request (its queue is full, or the request waited past its deadline)."""

    status = 429
    tei_status = 429
    openai_type = "rate_limit_error"
    tei_type = "overloaded"
    code = "overloaded"

    @property
    def headers(self) -> dict[str, str]:
        return {"retry-after": str(RETRY_AFTER_S)}


class NotReady(GatewayError):
    status = 503
    tei_status = 503
    openai_type = "server_error"
    tei_type = "unhealthy"


# The native backend's refusals (backend/src/instance_state.cc: queue_full, queue_timeout) say one of these.
_SHED = ("is overloaded", "in the queue, past its deadline")


def from_grpc(e: grpc.aio.AioRpcError, param: str | None = None) -> GatewayError:
    code, message = e.code(), e.details() or ""
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return BadRequest(message, param)
    if code == grpc.StatusCode.UNAVAILABLE and any(s in message for s in _SHED):
        return Overloaded(message)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND):
        return NotReady(f"the model is not available: {message}")
    return GatewayError(f"{code.name}: {message}")
