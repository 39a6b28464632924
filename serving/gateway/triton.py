"""The gateway's side of tritonserver: KServe v2 over gRPC (grpc.aio, raw tensors), one channel per process.

Texts go to the text model (``embed``: TEXT in, EMBEDDING out, and TOKENS, the tokens of each text with the special
ones, where the model's config declares that output); token ids go to the encoder (``bert``: input_ids and
attention_mask, padded to the longest). A request of more inputs than the model's max_batch_size is sent as several
calls at once, and the answers are joined in order.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import grpc
import numpy as np
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE, service_pb2, service_pb2_grpc

from serving.gateway import errors

RERANK_MODEL = "rerank"  # the rerank task's model (export/rerank.py): QUERY, DOCUMENTS -> SCORES
CLASSIFY_MODEL = "classify"  # the classify task's (export/classify.py): TEXT, TEXT_PAIR -> LOGITS, PROBABILITIES
TOKENS = "TOKENS"  # INT64 [n, 1]: tokens per text including special tokens
MATRYOSHKA = "matryoshka_dimensions"  # a model parameter: the truncated sizes it was trained for ("64,128,256")


@dataclass(frozen=True)
class ModelInfo:
    max_batch: int
    hidden: int  # 0 for a model without EMBEDDING (rerank, classify)
    counts_tokens: bool  # the model declares TOKENS
    matryoshka: tuple[int, ...]


@dataclass(frozen=True)
class Embedded:
    vectors: np.ndarray  # float32 [n, hidden], L2-normalised
    tokens: np.ndarray | None  # int64 [n]; None where the model does not count them


@dataclass(frozen=True)
class Classified:
    logits: np.ndarray  # float32 [n, labels]
    probabilities: np.ndarray  # float32 [n, labels], softmax of the logits
    labels: tuple[str, ...]  # the model's labels, in id order


def _bytes_tensor(texts: list[bytes]) -> bytes:
    """KServe's raw BYTES layout: each element as a 4-byte little-endian length, then its bytes."""
    return b"".join(len(t).to_bytes(4, "little") + t for t in texts)


def _info(config: service_pb2.ModelConfigResponse) -> ModelInfo:
    c = config.config
    outputs = {o.name: o for o in c.output}
    hidden = next((o.dims[-1] for o in c.output if o.name in ("EMBEDDING", "embedding")), 0)  # 0: no embedder
    sizes = c.parameters[MATRYOSHKA].string_value if MATRYOSHKA in c.parameters else ""
    dims = tuple(int(s) for s in sizes.split(",") if s.strip())
    return ModelInfo(max(c.max_batch_size, 1), int(hidden), TOKENS in outputs, dims)


class Triton:
    def __init__(
        self,
        url: str,
        model: str,
        encoder: str,
        rerank_model: str = RERANK_MODEL,
        classify_model: str = CLASSIFY_MODEL,
    ) -> None:
        self.url, self.model, self.encoder = url, model, encoder
        self.rerank_model, self.classify_model = rerank_model, classify_model
        self._info: dict[str, ModelInfo] = {}
        self._classify_config: tuple[int, tuple[str, ...]] | None = None

    async def start(self) -> None:
        """The channel, on the serving event loop (grpc.aio binds a channel to the loop it is made on)."""
        self.channel = grpc.aio.insecure_channel(
            self.url,
            options=[
                ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
                ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
            ],
        )
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    async def close(self) -> None:
        await self.channel.close()

    async def ready(self, model: str | None = None) -> bool:
        """Whether ``model`` (the text model by default) is loaded and ready."""
        try:
            answer = await self.stub.ModelReady(service_pb2.ModelReadyRequest(name=model or self.model), timeout=2)
        except grpc.aio.AioRpcError:
            return False
        return answer.ready

    async def info(self, model: str | None = None) -> ModelInfo:
        """The model's batch limit, width and outputs, read from its config once it has loaded."""
        model = model or self.model
        if model not in self._info:
            try:
                config = await self.stub.ModelConfig(service_pb2.ModelConfigRequest(name=model), timeout=5)
            except grpc.aio.AioRpcError as e:
                raise errors.from_grpc(e) from e
            self._info[model] = _info(config)
        return self._info[model]

    async def embed(self, texts: list[bytes], truncate: bool) -> Embedded:
        info = await self.info()
        n = info.max_batch
        parts = await asyncio.gather(
            *(self._texts(texts[i : i + n], i, truncate, info) for i in range(0, len(texts), n))
        )
        return _joined(parts)

    async def embed_ids(self, ids: list[list[int]]) -> Embedded:
        info = await self.info(self.encoder)
        n = info.max_batch
        parts = await asyncio.gather(*(self._ids(ids[i : i + n], i) for i in range(0, len(ids), n)))
        return _joined(parts)

    async def rerank(self, query: bytes, documents: list[bytes], truncate: bool, param: str = "texts") -> np.ndarray:
        """float32 [n]: the rerank model's score (the logit) of each (query, document) pair, in the documents'
        order; a refusal names ``param``, the request's field of the documents."""
        request = service_pb2.ModelInferRequest(model_name=self.rerank_model)
        request.inputs.add(name="QUERY", datatype="BYTES", shape=[1, 1])
        request.raw_input_contents.append(_bytes_tensor([query]))
        request.inputs.add(name="DOCUMENTS", datatype="BYTES", shape=[1, len(documents)])
        request.raw_input_contents.append(_bytes_tensor(documents))
        request.parameters["truncate"].bool_param = truncate
        try:
            answer = await self._call(request)
        except grpc.aio.AioRpcError as e:
            raise errors.from_grpc(e, param=param) from e
        return np.frombuffer(answer.raw_output_contents[0], dtype="<f4").reshape(-1)

    async def classify(self, texts: list[bytes], pairs: list[bytes] | None, truncate: bool) -> Classified:
        """The classify model's logits and probabilities of each text (or pair: texts[i] with pairs[i]), in
        order, in calls of at most its max_batch_size texts."""
        max_batch, labels = await self._classify_info()
        n = max_batch
        parts = await asyncio.gather(
            *(
                self._classify(texts[i : i + n], pairs[i : i + n] if pairs else None, i, truncate)
                for i in range(0, len(texts), n)
            )
        )
        return Classified(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), labels)

    async def _classify_info(self) -> tuple[int, tuple[str, ...]]:
        """The classify model's max_batch_size and labels, read from its config once it has loaded."""
        if self._classify_config is None:
            try:
                answer = await self.stub.ModelConfig(
                    service_pb2.ModelConfigRequest(name=self.classify_model), timeout=5
                )
            except grpc.aio.AioRpcError as e:
                raise errors.from_grpc(e) from e
            c = answer.config
            labels = tuple(json.loads(c.parameters["labels"].string_value))
            self._classify_config = (max(c.max_batch_size, 1), labels)
        return self._classify_config

    async def _classify(
        self, texts: list[bytes], pairs: list[bytes] | None, offset: int, truncate: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        request = service_pb2.ModelInferRequest(model_name=self.classify_model)
        request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts), 1])
        request.raw_input_contents.append(_bytes_tensor(texts))
        if pairs is not None:
            request.inputs.add(name="TEXT_PAIR", datatype="BYTES", shape=[len(pairs), 1])
            request.raw_input_contents.append(_bytes_tensor(pairs))
        for name in ("LOGITS", "PROBABILITIES"):
            request.outputs.add(name=name)
        request.parameters["truncate"].bool_param = truncate
        try:
            answer = await self._call(request)
        except grpc.aio.AioRpcError as e:
            error = errors.from_grpc(e, param="inputs")
            if offset:
                error.message = f"in the inputs from inputs[{offset}] on: {error.message}"
            raise error from e
        tensors = {o.name: (o, raw) for o, raw in zip(answer.outputs, answer.raw_output_contents, strict=True)}
        logits, probabilities = (
            np.frombuffer(tensors[k][1], dtype="<f4").reshape(tuple(tensors[k][0].shape))
            for k in ("LOGITS", "PROBABILITIES")
        )
        return logits, probabilities

    async def _texts(self, texts: list[bytes], offset: int, truncate: bool, info: ModelInfo) -> Embedded:
        request = service_pb2.ModelInferRequest(model_name=self.model)
        request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts), 1])
        request.raw_input_contents.append(_bytes_tensor(texts))
        request.outputs.add(name="EMBEDDING")
        if info.counts_tokens:
            request.outputs.add(name=TOKENS)
        if not truncate:
            request.parameters["truncate"].bool_param = False
        return await self._infer(request, offset, "EMBEDDING")

    async def _ids(self, ids: list[list[int]], offset: int) -> Embedded:
        width = max(len(seq) for seq in ids)
        padded = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for i, seq in enumerate(ids):
            padded[i, : len(seq)] = seq
            mask[i, : len(seq)] = 1
        request = service_pb2.ModelInferRequest(model_name=self.encoder)
        for name, tensor in (("input_ids", padded), ("attention_mask", mask)):
            request.inputs.add(name=name, datatype="INT64", shape=list(tensor.shape))
            request.raw_input_contents.append(tensor.tobytes())
        answer = await self._infer(request, offset, "embedding")
        return Embedded(answer.vectors, mask.sum(axis=1))

    async def _infer(self, request: service_pb2.ModelInferRequest, offset: int, output: str) -> Embedded:
        try:
            answer = await self._call(request)
        except grpc.aio.AioRpcError as e:
            error = errors.from_grpc(e, param="input")
            if offset:  # the model names elements of its own call: this call's first input is input[offset]
                error.message = f"in the inputs from input[{offset}] on: {error.message}"
            raise error from e
        tensors = {o.name: (o, raw) for o, raw in zip(answer.outputs, answer.raw_output_contents, strict=True)}
        meta, raw = tensors[output]
        vectors = np.frombuffer(raw, dtype="<f4").reshape(tuple(meta.shape))
        tokens = np.frombuffer(tensors[TOKENS][1], dtype="<i8").reshape(-1) if TOKENS in tensors else None
        return Embedded(vectors, tokens)

    async def _call(self, request: service_pb2.ModelInferRequest) -> service_pb2.ModelInferResponse:
        """One retry of a call the connection lost (the server closes connections after --grpc-max-connection-age-s,
        and a call sent as it does fails with UNAVAILABLE); never of a refusal (load shedding)."""
        try:
            return await self.stub.ModelInfer(request)
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE or isinstance(errors.from_grpc(e), errors.Overloaded):
                raise
            return await self.stub.ModelInfer(request)


def _joined(parts: list[Embedded]) -> Embedded:
    if len(parts) == 1:
        return parts[0]
    tokens = None if any(p.tokens is None for p in parts) else np.concatenate([p.tokens for p in parts])
    return Embedded(np.concatenate([p.vectors for p in parts]), tokens)
