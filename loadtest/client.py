"""One asyncio client over tritonclient's gRPC or HTTP aio API: readiness, inference, statistics."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from tritonclient.utils import InferenceServerException

from loadtest import CouldNotRunError
from loadtest.payload import TEXT_INPUT, TOKEN_INPUTS, Payload
from loadtest.stats import OK
from serving.client import connect, status_of

logger = logging.getLogger(__name__)

_DTYPES = {"object": "BYTES", "int64": "INT64", "float32": "FP32"}


def outcome_of(exc: BaseException) -> str:
    """A low-cardinality outcome label from a failed request: its status (serving.client.status_of), lower case."""
    return status_of(exc).lower()


class TritonClient:
    """Sends pre-built payloads to one model; `infer` returns an outcome label, never raises for a request."""

    def __init__(self, url: str, protocol: str, model: str, request_timeout_s: float) -> None:
        self.url, self.protocol, self.model = url, protocol, model
        self.request_timeout_s = request_timeout_s
        self._module, self._client = connect(url, protocol, aio=True, timeout_s=request_timeout_s)
        self._inputs: dict[int, list[Any]] = {}

    async def close(self) -> None:
        await self._client.close()

    async def wait_ready(self, timeout_s: float) -> str:
        """Poll until the server and model are ready; returns 'text' or 'tokens' (what the model takes)."""
        deadline = time.monotonic() + timeout_s
        reason = "no answer"
        while time.monotonic() < deadline:
            try:
                if not await self._client.is_server_ready():
                    reason = "server not ready"
                elif not await self._client.is_model_ready(self.model):
                    reason = f"model '{self.model}' not ready"
                else:
                    return await self._model_inputs()
            except InferenceServerException as exc:
                reason = f"{outcome_of(exc)}: {exc.message()}"
            except (OSError, asyncio.TimeoutError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(0.25)
        raise CouldNotRunError(f"{self.protocol}://{self.url} {reason} after {timeout_s:g} s")

    async def _model_inputs(self) -> str:
        meta = (
            await self._client.get_model_metadata(self.model, as_json=True)
            if self.protocol == "grpc"
            else (await self._client.get_model_metadata(self.model))
        )
        names = {i["name"] for i in meta.get("inputs", [])}
        if TEXT_INPUT in names:
            return "text"
        if set(TOKEN_INPUTS) <= names:
            return "tokens"
        raise CouldNotRunError(f"model '{self.model}' takes {sorted(names)}, not TEXT or input_ids/attention_mask")

    def _build_inputs(self, payload: Payload) -> list[Any]:
        inputs = []
        for name, array in payload.arrays.items():
            tensor = self._module.InferInput(name, list(array.shape), _DTYPES[str(array.dtype)])
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        return inputs

    async def infer(self, payload: Payload) -> str:
        inputs = self._inputs.get(id(payload))
        if inputs is None:
            inputs = self._inputs[id(payload)] = self._build_inputs(payload)
        try:
            if self.protocol == "grpc":
                await self._client.infer(self.model, inputs, client_timeout=self.request_timeout_s)
            else:
                await asyncio.wait_for(self._client.infer(self.model, inputs), self.request_timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any failure is this request's outcome, counted by status
            logger.debug("request failed: %r", exc)
            return outcome_of(exc)
        return OK

    async def statistics(self) -> dict[str, Any]:
        """Triton's cumulative inference statistics for every model (JSON form, counts as strings or ints)."""
        if self.protocol == "grpc":
            return await self._client.get_inference_statistics("", as_json=True)
        return await self._client.get_inference_statistics("")
