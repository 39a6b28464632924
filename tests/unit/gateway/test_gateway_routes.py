"""The gateway's routes against a fake Triton client: schemas, encodings, usage and every error's status and body."""

from __future__ import annotations

import base64

import grpc
import numpy as np
import pytest
from starlette.testclient import TestClient

from serving.gateway import app, errors, schemas
from serving.gateway.config import GatewayConfig
from serving.gateway.state import Gateway
from serving.gateway.triton import Classified, Embedded, ModelInfo

HIDDEN = 8


class FakeTriton:
    def __init__(self, matryoshka: tuple[int, ...] = (), fail: Exception | None = None) -> None:
        self.matryoshka, self.fail = matryoshka, fail
        self.calls: list[tuple] = []

    async def info(self, model: str | None = None) -> ModelInfo:
        return ModelInfo(32, HIDDEN, True, self.matryoshka)

    async def ready(self, model: str | None = None) -> bool:
        self.calls.append(("ready", model))
        return self.fail is None and model not in self.down

    down: tuple[str, ...] = ()
    rerank_model = "rerank"

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def _vectors(self, n: int) -> np.ndarray:
        v = np.random.default_rng(n).standard_normal((n, HIDDEN)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    async def embed(self, texts: list[bytes], truncate: bool) -> Embedded:
        if self.fail:
            raise self.fail
        self.calls.append(("embed", texts, truncate))
        return Embedded(self._vectors(len(texts)), np.array([len(t.split()) + 2 for t in texts]))

    async def embed_ids(self, ids: list[list[int]]) -> Embedded:
        self.calls.append(("ids", ids))
        return Embedded(self._vectors(len(ids)), np.array([len(s) for s in ids]))

    async def rerank(self, query: bytes, documents: list[bytes], truncate: bool, param: str = "texts") -> np.ndarray:
        """Logits that name the document: its length less the query's."""
        if self.fail:
            raise self.fail
        self.calls.append(("rerank", query, documents, truncate, param))
        return np.array([len(d) - len(query) for d in documents], dtype=np.float32)

    async def classify(self, texts: list[bytes], pairs: list[bytes] | None, truncate: bool) -> Classified:
        """Logits that name the row: label k's logit is k x (the text's length + the pair's), less 2 x k for a pair."""
        self.calls.append(("classify", texts, pairs, truncate))
        sizes = np.array([len(t) + (len(pairs[i]) if pairs else 0) for i, t in enumerate(texts)], dtype=np.float32)
        logits = sizes[:, None] * np.arange(3, dtype=np.float32) - (6 if pairs else 0)
        logits[:, 1] = 2.5 if pairs else -1.0
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return Classified(logits, e / e.sum(axis=1, keepdims=True), ("a", "b", "c"))


def client(triton: FakeTriton | None = None, keys: dict[str, str] | None = None, **cfg) -> TestClient:
    gw = Gateway(GatewayConfig(**cfg), triton or FakeTriton(), keys)
    return TestClient(app.create(gw))


def test_openai_float_and_base64_agree_and_count_tokens():
    c = client()
    plain = c.post("/v1/embeddings", json={"input": ["a b", "c"], "model": "embed"})
    packed = c.post("/v1/embeddings", json={"input": ["a b", "c"], "model": "embed", "encoding_format": "base64"})
    assert plain.status_code == packed.status_code == 200
    body = schemas.EmbeddingsResponse.model_validate(plain.json())
    assert [d.index for d in body.data] == [0, 1] and body.usage.prompt_tokens == body.usage.total_tokens == 7
    for d, p in zip(body.data, packed.json()["data"], strict=True):
        decoded = np.frombuffer(base64.b64decode(p["embedding"]), dtype="<f4")
        assert np.array_equal(np.float32(d.embedding), decoded)


def test_openai_token_ids_go_to_the_encoder():
    fake = FakeTriton()
    c = client(fake)
    one = c.post("/v1/embeddings", json={"input": [101, 7592, 102], "model": "embed"})
    many = c.post("/v1/embeddings", json={"input": [[101, 102], [101, 7592, 2088, 102]], "model": "embed"})
    assert one.json()["usage"]["prompt_tokens"] == 3 and many.json()["usage"]["prompt_tokens"] == 6
    assert fake.calls == [("ids", [[101, 7592, 102]]), ("ids", [[101, 102], [101, 7592, 2088, 102]])]


def test_texts_are_refused_truncation():
    fake = FakeTriton()
    client(fake).post("/v1/embeddings", json={"input": "x", "model": "embed"})
    client(fake).post("/embed", json={"inputs": "x", "truncate": True})
    assert [call[2] for call in fake.calls] == [False, True]


def test_models_lists_the_text_model():
    assert [m["id"] for m in client().get("/v1/models").json()["data"]] == ["embed"]


@pytest.mark.parametrize(
    ("body", "status", "param", "says"),
    [
        ({"input": ["ok", ""], "model": "embed"}, 400, "input", "'input[1]' is an empty string"),
        ({"input": [], "model": "embed"}, 400, "input", "must not be empty"),
        ({"input": [[1], []], "model": "embed"}, 400, "input", "'input[1]' is an empty array"),
        ({"input": [1.5], "model": "embed"}, 400, "input", "input"),
        ({"input": "x"}, 400, "model", "model"),
        ({"input": "x", "model": "embed", "encoding_format": "hex"}, 400, "encoding_format", "encoding_format"),
        ({"input": "x", "model": "embed", "dimensions": 4}, 400, "dimensions", "not trained for truncated"),
        ({"input": "x", "model": "gpt"}, 404, "model", "does not exist"),
    ],
)
def test_openai_errors_name_the_problem(body, status, param, says):
    r = client().post("/v1/embeddings", json=body)
    assert r.status_code == status
    error = schemas.OpenAIError.model_validate(r.json()).error
    assert error.param == param and says in error.message
    assert error.type == ("invalid_request_error")


def test_malformed_json_is_a_400():
    r = client().post("/v1/embeddings", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_dimensions_of_a_matryoshka_model_are_renormalised():
    r = client(FakeTriton(matryoshka=(4,))).post(
        "/v1/embeddings", json={"input": "x", "model": "embed", "dimensions": 4}
    )
    v = np.float32(r.json()["data"][0]["embedding"])
    assert v.shape == (4,) and abs(float(np.linalg.norm(v)) - 1) < 1e-6


def test_keys_are_required_except_for_health():
    c = client(keys={"secret": "alice"})
    assert c.post("/v1/embeddings", json={"input": "x", "model": "embed"}).status_code == 401
    assert c.post("/embed", json={"inputs": "x"}).json()["error_type"] == "unauthorized"
    ok = c.post("/v1/embeddings", json={"input": "x", "model": "embed"}, headers={"authorization": "Bearer secret"})
    assert ok.status_code == 200 and c.get("/health").status_code == 200


def test_a_body_over_the_limit_is_413():
    r = client(max_body_bytes=100).post("/v1/embeddings", json={"input": "x" * 200, "model": "embed"})
    assert r.status_code == 413 and r.json()["error"]["type"] == "invalid_request_error"


class Refusal(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@pytest.mark.parametrize(
    ("code", "details", "kind", "status", "tei_status"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, "TEXT element 0 is empty", errors.BadRequest, 400, 422),
        (grpc.StatusCode.UNAVAILABLE, "embed is overloaded: 64 requests queued", errors.Overloaded, 429, 429),
        (
            grpc.StatusCode.UNAVAILABLE,
            "embed: the request waited 9 ms in the queue, past its deadline of 5 ms",
            errors.Overloaded,
            429,
            429,
        ),
        (grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses", errors.NotReady, 503, 503),
        (grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'embed' is not found", errors.NotReady, 503, 503),
        (grpc.StatusCode.INTERNAL, "boom", errors.GatewayError, 500, 424),
    ],
)
def test_tritons_answers_map_to_one_error_each(code, details, kind, status, tei_status):
    e = errors.from_grpc(Refusal(code, details))
    assert type(e) is kind and (e.status, e.tei_status) == (status, tei_status)
    fake = FakeTriton(fail=e)
    r = client(fake).post("/v1/embeddings", json={"input": "x", "model": "embed"})
    t = client(fake).post("/embed", json={"inputs": "x"})
    assert (r.status_code, t.status_code) == (status, tei_status)
    assert details in r.json()["error"]["message"] and details in t.json()["error"]
    assert (r.headers.get("retry-after") == "1") == (status == 429)


def test_tei_embed_returns_arrays_and_refuses_what_it_cannot_do():
    c = client()
    r = c.post("/embed", json={"inputs": ["a", "b"]})
    assert r.status_code == 200 and np.array(r.json()).shape == (2, HIDDEN)
    for extra in ({"normalize": False}, {"truncation_direction": "Left"}, {"prompt_name": "query"}):
        bad = c.post("/embed", json={"inputs": "a", **extra})
        assert bad.status_code == 422 and bad.json()["error_type"] == "validation"
    assert c.post("/embed", json={"inputs": []}).status_code == 422


def test_health_and_metrics_by_route():
    c = client()
    c.post("/v1/embeddings", json={"input": "x", "model": "embed"})
    assert c.get("/health").status_code == 200
    assert client(FakeTriton(fail=errors.NotReady("down"))).get("/health").status_code == 503
    text = c.get("/metrics").text
    assert 'bertserve_gateway_requests_total{route="/v1/embeddings",status="200"} 1.0' in text
    assert 'bertserve_gateway_request_duration_seconds_count{route="/health"} 1.0' in text


def test_health_needs_every_model_the_routes_call(tmp_path):
    """A rerank-only repository is healthy on its reranker alone; a mixed one needs both, and says which is down."""
    from serving.gateway.state import fronted_models

    (tmp_path / "repository.json").write_text('{"models": {"rerank": {"backend": "bertserve", "task": "rerank"}}}')
    fronted = fronted_models(tmp_path, "embed", "rerank", "classify")
    assert fronted == {"rerank": "rerank"}
    fake = FakeTriton()
    c = TestClient(app.create(Gateway(GatewayConfig(), fake, fronted=fronted)))
    assert c.get("/health").status_code == 200 and fake.calls == [("ready", "rerank")]
    (tmp_path / "repository.json").write_text(
        '{"models": {"e": {"backend": "bertserve", "task": "embed", "encoder": "e_bert"}, "e_bert": {"backend": "x"},'
        ' "r": {"backend": "bertserve", "task": "rerank"}, "r2": {"backend": "bertserve", "task": "rerank"}}}'
    )
    fronted = fronted_models(tmp_path, "embed", "r2", "classify")
    assert fronted == {"embed": "e", "rerank": "r2"}
    fake = FakeTriton()
    fake.down = ("r2",)
    r = TestClient(app.create(Gateway(GatewayConfig(), fake, fronted=fronted))).get("/health")
    assert r.status_code == 503 and "r2 is not ready" in r.text


class Stub:
    def __init__(self, *failures: grpc.aio.AioRpcError) -> None:
        self.failures, self.calls = list(failures), 0

    async def ModelInfer(self, request):  # noqa: N802 (the gRPC method's name)
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "answer"


@pytest.mark.parametrize(
    ("failure", "calls", "answered"),
    [
        (Refusal(grpc.StatusCode.UNAVAILABLE, "Socket closed"), 2, True),  # the server's connection age: once more
        (Refusal(grpc.StatusCode.UNAVAILABLE, "embed is overloaded: 64 requests queued"), 1, False),  # shed: never
        (Refusal(grpc.StatusCode.INVALID_ARGUMENT, "TEXT element 0 is empty"), 1, False),
    ],
)
def test_a_call_the_connection_lost_is_sent_once_more_a_refusal_never(failure, calls, answered):
    import asyncio

    from serving.gateway.triton import Triton

    t = Triton("unused:1", "embed", "bert")
    t.stub = Stub(failure)
    try:
        result = asyncio.run(t._call(None))
    except grpc.aio.AioRpcError:
        result = None
    assert t.stub.calls == calls and (result == "answer") == answered


def test_tei_predict_answers_each_row_sorted_and_keeps_the_order_of_a_mixed_batch():
    fake = FakeTriton()
    c = client(fake)
    single = c.post("/predict", json={"inputs": "xy"})
    assert single.status_code == 200, single.json()
    assert [p["label"] for p in single.json()] == ["c", "a", "b"]  # logits 4, 0, -1
    assert abs(sum(p["score"] for p in single.json()) - 1) < 1e-6
    raw = c.post("/predict", json={"inputs": ["x", "y"], "raw_scores": True}).json()  # one pair: logits -4, 2.5, -2
    assert [(p["label"], p["score"]) for p in raw] == [("b", 2.5), ("c", -2.0), ("a", -6.0)]
    fake.calls.clear()
    batch = c.post("/predict", json={"inputs": [["x", "y"], ["abcd"], ["p", "q"]], "truncate": True}).json()
    assert fake.calls == [("classify", [b"abcd"], None, True), ("classify", [b"x", b"p"], [b"y", b"q"], True)]
    assert [row[0]["label"] for row in batch] == ["b", "c", "b"]
    assert len(batch) == 3 and all(len(row) == 3 for row in batch)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"inputs": []}, "`inputs` cannot be empty"),
        ({"inputs": [["a", "b", "c"]]}, "'inputs[0]' holds 3 strings"),
        ({"inputs": [["a"], []]}, "'inputs[1]' holds 0 strings"),
        ({"inputs": ["", "b"]}, "'inputs[0]' is an empty string"),
        ({"inputs": 3}, "'inputs"),
    ],
)
def test_tei_predict_refuses_bad_inputs_with_422(body, message):
    fake = FakeTriton()
    response = client(fake).post("/predict", json=body)
    assert response.status_code == 422 and message in response.json()["error"], response.json()
    assert fake.calls == []
