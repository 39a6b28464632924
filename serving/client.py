"""A small client for ``embed``: gRPC or HTTP, sync or asyncio, with deadlines and retries on UNAVAILABLE; and
for the other tasks, ``RerankClient`` (``rerank``) and ``ClassifyClient`` (``classify``).

    from serving.client import EmbedClient
    with EmbedClient("127.0.0.1:8001") as c:
        vectors = c.embed(["hello world"])          # float32 [n, hidden], L2-normalised
    with ClassifyClient("127.0.0.1:8001") as c:
        c.classify(["great film"]).labels           # ["positive"]: each text's most probable label

Every server status maps to one exception hierarchy (``EmbedError``). Inference is idempotent, so UNAVAILABLE
(server starting, restarting or shedding load) is retried with exponential backoff inside the deadline.

Several replicas: give a DNS name that resolves to all of them, e.g. in Kubernetes the headless Service
``dns:///bertserve-grpc.<namespace>.svc.cluster.local:8001``. The gRPC client connects to every address and
sends each call to the next one (``round_robin``), so one client spreads its calls; the servers close
connections after ``--grpc-max-connection-age-s`` (GOAWAY), the client resolves the name again and reaches
the replicas added since it connected.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE, KeepAliveOptions
from tritonclient.utils import InferenceServerException

DEFAULT_URL = "127.0.0.1:8001"  # the launcher's gRPC port on this host (serving.launcher.config)
MAX_BACKOFF_S = 1.0
# The least time between two DNS resolutions of the target (gRPC's default is 30 s): a server's GOAWAY asks for
# one, and a replica added since the last one is reached from then on.
MIN_RERESOLVE_S = 5.0


class EmbedError(Exception):
    """Base of every client error; ``status`` is the server's gRPC status name or HTTP code."""

    def __init__(self, message: str, status: str = "") -> None:
        super().__init__(message)
        self.status = status


class InvalidInput(EmbedError):
    """The request was rejected (gRPC INVALID_ARGUMENT / HTTP 400)."""


class Unavailable(EmbedError):
    """The server is down, not ready or shedding load (gRPC UNAVAILABLE / HTTP 503, or no connection)."""


class DeadlineExceeded(EmbedError):
    """The deadline passed before an answer came."""


class NotFound(EmbedError):
    """Unknown model (gRPC NOT_FOUND / HTTP 400 'unknown model')."""


_GRPC = {
    "INVALID_ARGUMENT": InvalidInput,
    "UNAVAILABLE": Unavailable,
    "DEADLINE_EXCEEDED": DeadlineExceeded,
    "NOT_FOUND": NotFound,
}
_HTTP = {"400": InvalidInput, "503": Unavailable, "504": DeadlineExceeded, "404": NotFound}


def server_status(e: InferenceServerException) -> str:
    """The status the server answered with: a gRPC status name or an HTTP code; "" when none came."""
    return str(e.status() or "").removeprefix("StatusCode.")


def status_of(e: BaseException) -> str:
    """One status name for any failed call, as the load tester and the reliability runs count them: the server's
    (gRPC name or HTTP code), else DEADLINE_EXCEEDED for the client's own timeout, UNAVAILABLE for no connection,
    CLIENT_ERROR for anything else."""
    if isinstance(e, InferenceServerException):
        return server_status(e) or "UNKNOWN"
    if isinstance(e, asyncio.TimeoutError | TimeoutError):
        return "DEADLINE_EXCEEDED"
    if isinstance(e, ConnectionError | OSError):
        return "UNAVAILABLE"
    return "CLIENT_ERROR"


def map_error(e: Exception) -> EmbedError:
    """One exception type per failure class, whatever the protocol."""
    if isinstance(e, EmbedError):
        return e
    if isinstance(e, InferenceServerException):
        status = server_status(e)
        message = e.message() or str(e)
        if "has no available versions" in message:  # the model is (re)loading: retryable
            return Unavailable(message, status)
        if "unknown model" in message.lower() or ("not found" in message.lower() and status in ("400", "NOT_FOUND")):
            return NotFound(message, status)
        cls = _GRPC.get(status) or _HTTP.get(status)
        if cls is None and not status:  # no status: the connection itself failed
            cls = Unavailable
        return (cls or EmbedError)(message, status)
    if isinstance(e, (ConnectionError, OSError, asyncio.TimeoutError)):
        return Unavailable(str(e) or type(e).__name__)
    return EmbedError(f"{type(e).__name__}: {e}")


class _Base:
    def __init__(
        self,
        url: str = DEFAULT_URL,
        protocol: str = "grpc",
        model: str = "embed",
        timeout_s: float = 2.0,
        retries: int = 3,
        backoff_s: float = 0.05,
    ) -> None:
        self.url, self.protocol, self.model = url, protocol, model
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s

    def _inputs(self, texts: list[str], types: Any) -> list[Any]:
        if not texts:
            raise InvalidInput("no texts given")
        data = np.array([[t.encode("utf-8") if isinstance(t, str) else t] for t in texts], dtype=np.object_)
        inp = types.InferInput("TEXT", list(data.shape), "BYTES")
        inp.set_data_from_numpy(data)
        return [inp]

    def _kwargs(self, remaining: float, truncate: bool) -> dict[str, Any]:
        """The deadline goes to the server too (Triton's queue timeout, in µs), so it drops what nobody awaits."""
        remaining = max(remaining, 0.001)
        kw: dict[str, Any] = {"parameters": {"truncate": truncate}, "timeout": int(remaining * 1e6)}
        if self.protocol == "grpc":
            kw["client_timeout"] = remaining
        return kw

    def _delay(self, attempt: int, deadline: float) -> float | None:
        """Capped exponential backoff before the next try, or None when no retry fits in the deadline."""
        delay = min(self.backoff_s * (2**attempt), MAX_BACKOFF_S)
        if attempt >= self.retries or time.monotonic() + delay >= deadline:
            return None
        return delay


def _grpc_channel_args() -> list[tuple[str, int | str]]:
    """tritonclient's own channel defaults, plus reconnection as patient as the retries: gRPC's default reconnect
    backoff (1 s growing 1.6x to 120 s) would keep a channel failing fast for seconds after a restarted server is
    back, whatever the retry loop does. Calls go round-robin over every address the target resolves to."""
    ka = KeepAliveOptions()
    return [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.keepalive_time_ms", ka.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", ka.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", ka.keepalive_permit_without_calls),
        ("grpc.http2.max_pings_without_data", ka.http2_max_pings_without_data),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", int(MAX_BACKOFF_S * 1000)),
        ("grpc.lb_policy_name", "round_robin"),
        ("grpc.dns_min_time_between_resolutions_ms", int(MIN_RERESOLVE_S * 1000)),
    ]


def connect(url: str, protocol: str, *, aio: bool, timeout_s: float | None = None) -> tuple[Any, Any]:
    """tritonclient's module for ``protocol`` (its InferInput and friends) and a client of ``url``: the one place
    connections are made, for this library, the load tester and the reliability runs. gRPC channels balance
    round-robin over every address the name resolves to (``_grpc_channel_args``); ``timeout_s`` bounds HTTP
    connecting (and, synchronously, each call)."""
    if protocol == "grpc":
        import tritonclient.grpc as module
        import tritonclient.grpc.aio as aio_module

        return module, (aio_module if aio else module).InferenceServerClient(url, channel_args=_grpc_channel_args())
    if protocol != "http":
        raise ValueError(f"protocol must be 'grpc' or 'http', got {protocol!r}")
    import tritonclient.http as module
    import tritonclient.http.aio as aio_module

    if timeout_s is None:
        return module, (aio_module if aio else module).InferenceServerClient(url)
    if aio:
        return module, aio_module.InferenceServerClient(url, conn_timeout=timeout_s)
    return module, module.InferenceServerClient(url, connection_timeout=timeout_s, network_timeout=timeout_s)


class EmbedClient(_Base):
    """Synchronous client."""

    def __init__(self, url: str = DEFAULT_URL, protocol: str = "grpc", **kw: Any) -> None:
        super().__init__(url, protocol, **kw)
        self._types, self._client = connect(url, protocol, aio=False, timeout_s=self.timeout_s)

    def embed(self, texts: list[str], truncate: bool = True, timeout_s: float | None = None) -> np.ndarray:
        inputs = self._inputs(texts, self._types)
        return self._infer(inputs, truncate, timeout_s).as_numpy("EMBEDDING")

    def _infer(self, inputs: list[Any], truncate: bool, timeout_s: float | None, **parameters: Any) -> Any:
        """The model's result for ``inputs``; a refusal (Unavailable) retried with backoff within the deadline."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        for attempt in range(self.retries + 1):
            try:
                kw = self._kwargs(deadline - time.monotonic(), truncate)
                kw["parameters"].update(parameters)
                return self._client.infer(self.model, inputs, **kw)
            except Exception as e:
                err = map_error(e)
                delay = self._delay(attempt, deadline) if isinstance(err, Unavailable) else None
                if delay is None:
                    raise err from e
                time.sleep(delay)
        raise AssertionError("unreachable")

    def ready(self) -> bool:
        try:
            return bool(self._client.is_server_ready())
        except Exception:
            return False

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> EmbedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RerankClient(EmbedClient):
    """Synchronous client of the rerank task (a cross-encoder repository: ``python -m export --task rerank``)."""

    def __init__(self, url: str = DEFAULT_URL, protocol: str = "grpc", **kw: Any) -> None:
        super().__init__(url, protocol, **{"model": "rerank", **kw})

    def rerank(
        self,
        query: str,
        documents: list[str],
        truncation: str = "longest_first",
        truncate: bool = True,
        timeout_s: float | None = None,
    ) -> np.ndarray:
        """float32 [n]: the score of each document for ``query``, in the documents' order (``np.argsort(-scores)``
        ranks them). ``truncation``: longest_first or only_second; ``truncate=False`` refuses a pair past max_seq."""
        if not documents:
            raise InvalidInput("no documents given")
        inputs = [
            _bytes_input(self._types, name, [[v.encode("utf-8") for v in values]])
            for name, values in (("QUERY", [query]), ("DOCUMENTS", documents))
        ]
        result = self._infer(inputs, truncate, timeout_s, truncation=truncation)
        return result.as_numpy("SCORES").reshape(-1)


@dataclass(frozen=True)
class Classification:
    logits: np.ndarray  # float32 [n, labels]
    probabilities: np.ndarray  # float32 [n, labels]: softmax of the logits
    labels: list[str]  # per text, the most probable label's name


class ClassifyClient(EmbedClient):
    """Synchronous client of the classify task (a classifier repository: ``python -m export --task classify``)."""

    def __init__(self, url: str = DEFAULT_URL, protocol: str = "grpc", **kw: Any) -> None:
        super().__init__(url, protocol, **{"model": "classify", **kw})

    def classify(
        self,
        texts: list[str],
        pairs: list[str] | None = None,
        truncation: str = "longest_first",
        truncate: bool = True,
        timeout_s: float | None = None,
    ) -> Classification:
        """Each text's logits, probabilities and label; with ``pairs``, texts[i] is classified with pairs[i] (as
        ``[CLS] text [SEP] pair [SEP]``). ``truncation`` (pairs): longest_first or only_second; ``truncate=False``
        refuses a text or pair past max_seq."""
        if not texts:
            raise InvalidInput("no texts given")
        if pairs is not None and len(pairs) != len(texts):
            raise InvalidInput(f"{len(pairs)} pair texts for {len(texts)} texts: give one per text")
        inputs = [_bytes_input(self._types, "TEXT", [[t.encode("utf-8")] for t in texts])]
        if pairs is not None:
            inputs.append(_bytes_input(self._types, "TEXT_PAIR", [[t.encode("utf-8")] for t in pairs]))
        result = self._infer(inputs, truncate, timeout_s, truncation=truncation)
        labels = [b.decode("utf-8") for b in result.as_numpy("LABEL").reshape(-1)]
        return Classification(result.as_numpy("LOGITS"), result.as_numpy("PROBABILITIES"), labels)


def _bytes_input(types: Any, name: str, rows: list[list[bytes]]) -> Any:
    data = np.array(rows, dtype=np.object_)
    inp = types.InferInput(name, list(data.shape), "BYTES")
    inp.set_data_from_numpy(data)
    return inp


class AsyncEmbedClient(_Base):
    """asyncio client (tritonclient's grpc.aio / http.aio)."""

    def __init__(self, url: str = DEFAULT_URL, protocol: str = "grpc", **kw: Any) -> None:
        super().__init__(url, protocol, **kw)
        self._types, self._client = connect(url, protocol, aio=True)

    async def embed(self, texts: list[str], truncate: bool = True, timeout_s: float | None = None) -> np.ndarray:
        budget = timeout_s or self.timeout_s
        deadline = time.monotonic() + budget
        inputs = self._inputs(texts, self._types)
        for attempt in range(self.retries + 1):
            try:
                call = self._client.infer(self.model, inputs, **self._kwargs(deadline - time.monotonic(), truncate))
                result = await asyncio.wait_for(call, timeout=max(deadline - time.monotonic(), 0.001))
                return result.as_numpy("EMBEDDING")
            except Exception as e:
                err = DeadlineExceeded("deadline passed") if isinstance(e, asyncio.TimeoutError) else map_error(e)
                delay = self._delay(attempt, deadline) if isinstance(err, Unavailable) else None
                if delay is None:
                    raise err from e
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def close(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> AsyncEmbedClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
