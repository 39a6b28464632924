"""The load tester's client of the gateway's ``POST /v1/embeddings`` (``--protocol openai``, ``--url host:8080``).

The same interface as ``loadtest.client.TritonClient``: readiness, one outcome label per request, statistics (none:
the gateway has no Triton statistics API, so a step's server-side breakdown stays empty). Texts go as an array of
strings with ``encoding_format: float``, the answer that costs the server the most to encode.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
import orjson

from loadtest import CouldNotRunError
from loadtest.payload import TEXT_INPUT, Payload
from loadtest.stats import OK

logger = logging.getLogger(__name__)


class OpenAIClient:
    def __init__(self, url: str, protocol: str, model: str, request_timeout_s: float) -> None:
        self.url, self.model = url, model
        self.timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._bodies: dict[int, bytes] = {}

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:  # created inside the running loop
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=self.timeout)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def wait_ready(self, timeout_s: float) -> str:
        """Poll the gateway's /health until the model is ready; the route takes texts."""
        deadline = time.monotonic() + timeout_s
        reason = "no answer"
        while time.monotonic() < deadline:
            try:
                async with self.session.get(f"http://{self.url}/health") as r:
                    if r.status == 200:
                        return "text"
                    reason = f"health {r.status}"
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(0.25)
        raise CouldNotRunError(f"openai://{self.url} {reason} after {timeout_s:g} s")

    def _body(self, payload: Payload) -> bytes:
        texts = [t.decode() for t in payload.arrays[TEXT_INPUT].reshape(-1)]
        return orjson.dumps({"model": self.model, "input": texts, "encoding_format": "float"})

    async def infer(self, payload: Payload) -> str:
        body = self._bodies.get(id(payload))
        if body is None:
            body = self._bodies[id(payload)] = self._body(payload)
        url = f"http://{self.url}/v1/embeddings"
        try:
            async with self.session.post(url, data=body, headers={"content-type": "application/json"}) as r:
                await r.read()
                return OK if r.status == 200 else str(r.status)
        except asyncio.CancelledError:
            raise
        except asyncio.TimeoutError:
            return "deadline_exceeded"
        except (aiohttp.ClientError, OSError) as exc:
            logger.debug("request failed: %r", exc)
            return "unavailable"

    async def statistics(self) -> dict[str, Any]:
        return {}
