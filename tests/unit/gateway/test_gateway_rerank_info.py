"""The gateway's /v1/rerank (Cohere's and Jina's rerank API), /info over several models and /tokenize's tokenizer,
against a fake Triton client and repositories written here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from serving.gateway import app, errors, schemas
from serving.gateway.config import GatewayConfig
from serving.gateway.state import Gateway, load_repository, tokenizer_file
from tests.unit.gateway.test_gateway_routes import FakeTriton

DOCUMENTS = ["a", "abcd", "ab", "abc"]  # the fake's logits: len(document) - len(query)


def client(fake: FakeTriton | None = None, fronted: dict | None = None, manifests: dict | None = None) -> TestClient:
    gw = Gateway(GatewayConfig(), fake or FakeTriton(), fronted=fronted or {}, manifests=manifests or {})
    return TestClient(app.create(gw))


def test_results_are_sorted_by_sigmoid_of_the_logit_and_cut_to_top_n():
    fake = FakeTriton()
    r = client(fake).post("/v1/rerank", json={"query": "q", "documents": DOCUMENTS, "top_n": 3})
    assert r.status_code == 200, r.json()
    body = schemas.CohereRerankResponse.model_validate(r.json())
    assert [x.index for x in body.results] == [1, 3, 2]
    logits = np.array([len(d) - 1 for d in DOCUMENTS], dtype=np.float64)
    assert [x.relevance_score for x in body.results] == [float(1 / (1 + np.exp(-logits[i]))) for i in (1, 3, 2)]
    assert all(x.document is None for x in body.results) and "document" not in r.json()["results"][0]
    assert body.model == "rerank" and body.usage.total_tokens is None
    assert fake.calls == [("rerank", b"q", [d.encode() for d in DOCUMENTS], True, "documents")]


def test_cohere_v2_path_is_the_same_route():
    body = {"model": "rerank", "query": "q", "documents": DOCUMENTS, "top_n": 2, "priority": 1}
    v1, v2 = (client().post(path, json=body).json() for path in ("/v1/rerank", "/v2/rerank"))
    assert v1["results"] == v2["results"] and [r["index"] for r in v2["results"]] == [1, 3]


def test_objects_with_text_and_return_documents():
    documents = [{"text": "abc", "title": "not read"}, "a"]
    r = client().post("/v1/rerank", json={"query": "q", "documents": documents, "return_documents": True})
    assert [x["document"] for x in r.json()["results"]] == [{"text": "abc"}, {"text": "a"}]
    tei = client().post("/rerank", json={"query": "q", "texts": ["abc", "a"]}).json()
    assert [x["relevance_score"] for x in r.json()["results"]] == [x["score"] for x in tei]


@pytest.mark.parametrize(
    ("body", "status", "param", "says"),
    [
        ({"query": "q", "documents": []}, 400, "documents", "'documents' must not be empty"),
        ({"query": "q", "documents": ["a", ""]}, 400, "documents", "'documents[1]' is an empty string"),
        ({"query": "q", "documents": ["a", 3]}, 400, "documents", "'documents[1]' must be a string or an object"),
        ({"query": "q", "documents": [{"image": "x"}]}, 400, "documents", "'documents[0]' must be a string"),
        ({"query": "q", "documents": ["a"] * 2049}, 400, "documents", "at most 2048"),
        ({"query": "", "documents": ["a"]}, 400, "query", "'query' is an empty string"),
        ({"query": 3, "documents": ["a"]}, 400, "query", "'query'"),
        ({"documents": ["a"]}, 400, "query", "'query': Field required"),
        ({"query": "q"}, 400, "documents", "'documents': Field required"),
        ({"query": "q", "documents": ["a"], "top_n": 0}, 400, "top_n", "'top_n'"),
        ({"query": "q", "documents": ["a"], "max_tokens_per_doc": 64}, 400, "max_tokens_per_doc", "of 128 tokens"),
        ({"query": "q", "documents": ["a"], "rank_fields": ["title"]}, 400, "rank_fields", "ranked by their 'text'"),
        ({"query": "q", "documents": ["a"], "max_chunks_per_doc": 2}, 400, "max_chunks_per_doc", "not chunked"),
        ({"query": "q", "documents": ["a"], "return_embeddings": True}, 400, "return_embeddings", "no embeddings"),
        ({"query": "q", "documents": ["a"], "relevant_spans": {"x": 1}}, 400, "relevant_spans", "whole pairs"),
        ({"query": "q", "documents": ["a"], "model": "embed"}, 404, "model", "reranker is 'rerank'"),
    ],
)
def test_each_bad_field_is_named(body, status, param, says):
    fake = FakeTriton()
    r = client(fake, manifests={"rerank": {"max_seq": 128}}).post("/v1/rerank", json=body)
    assert r.status_code == status, r.json()
    error = schemas.OpenAIError.model_validate(r.json()).error
    assert error.param == param and says in error.message, error
    assert fake.calls == []


def test_what_the_max_length_makes_moot_is_taken():
    r = client(manifests={"rerank": {"max_seq": 128}}).post(
        "/v1/rerank", json={"query": "q", "documents": ["a"], "max_tokens_per_doc": 4096, "rank_fields": ["text"]}
    )
    assert r.status_code == 200, r.json()


def test_no_reranker_is_503_and_a_shed_request_429():
    r = client(fronted={"embed": "embed"}).post("/v1/rerank", json={"query": "q", "documents": ["a"]})
    assert r.status_code == 503 and "serves no reranker" in r.json()["error"]["message"]
    shed = FakeTriton(fail=errors.Overloaded("rerank is overloaded"))
    r = client(shed, fronted={"rerank": "ranker"}).post("/v1/rerank", json={"query": "q", "documents": ["a"]})
    assert r.status_code == 429 and r.headers["retry-after"] == "1"


def _repository(tmp_path: Path) -> Path:
    """An embedder ``docs`` served as the ensemble of ``docs_tokenizer`` (no tokenizer of its own), a reranker
    ``ranker`` with its own, and a classifier ``labels``."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    for model, manifest in {
        "docs": {"source": "minilm", "max_seq": 64, "max_batch": 8, "precision": "fp32", "steps": ["docs_tokenizer"]},
        "ranker": {"source": "ce", "max_seq": 128, "max_batch": 4, "labels": {"0": "LABEL_0"}, "tokenizer": "t.json"},
        "labels": {"source": "cls", "max_seq": 32, "max_batch": 2, "labels": {"0": "neg", "1": "pos"}},
    }.items():
        (tmp_path / model).mkdir()
        (tmp_path / model / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "docs_tokenizer" / "1" / "tokenizer").mkdir(parents=True)
    tok.save(str(tmp_path / "docs_tokenizer" / "1" / "tokenizer" / "tokenizer.json"))
    tok.save(str(tmp_path / "ranker" / "t.json"))
    return tmp_path


def test_each_model_finds_its_own_tokenizer(tmp_path):
    repo = _repository(tmp_path)
    tokenizers, manifests = load_repository(repo, ["docs", "ranker", "labels"])
    assert set(tokenizers) == {"docs", "ranker"} and manifests["labels"]["source"] == "cls"
    assert tokenizer_file(repo, "docs", manifests["docs"]) == repo / "docs_tokenizer/1/tokenizer/tokenizer.json"
    assert tokenizer_file(repo, "ranker", manifests["ranker"]) == repo / "ranker/t.json"
    gw = Gateway(GatewayConfig(model="docs"), FakeTriton(), fronted={"embed": "docs"})
    gw.tokenizers, gw.manifests = tokenizers, manifests
    r = TestClient(app.create(gw)).post("/tokenize", json={"inputs": "hello world"})
    assert r.status_code == 200 and [t["id"] for t in r.json()[0]] == [1, 2]


def test_a_tokenizer_outside_its_model_is_not_read(tmp_path):
    repo = _repository(tmp_path)
    (repo / "ranker" / "manifest.json").write_text(json.dumps({"tokenizer": "../docs_tokenizer/1/tokenizer/x"}))
    tokenizers, _ = load_repository(repo, ["ranker"])
    assert tokenizers == {}


def test_info_keeps_teis_shape_for_the_primary_and_lists_every_model(tmp_path):
    repo = _repository(tmp_path)
    fronted = {"embed": "docs", "rerank": "ranker", "classify": "labels"}
    gw = Gateway(GatewayConfig(model="docs"), FakeTriton(), fronted=fronted)
    gw.tokenizers, gw.manifests = load_repository(repo, list(fronted.values()))
    info = schemas.Info.model_validate(TestClient(app.create(gw)).get("/info").json())
    assert (info.model_id, info.max_input_length, info.max_batch_tokens) == ("minilm", 64, 512)
    assert info.model_type == {"embedding": {"pooling": "mean"}}
    assert [(m.name, m.task) for m in info.models] == [("docs", "embed"), ("ranker", "rerank"), ("labels", "classify")]
    assert info.models[1].model_type == {"reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}}
    assert info.models[2].model_type["classifier"]["label2id"] == {"neg": 0, "pos": 1}
    assert info.models[2].max_batch_tokens == 64
    only_ranker = Gateway(GatewayConfig(), FakeTriton(), fronted={"rerank": "ranker"}, manifests=gw.manifests)
    info = TestClient(app.create(only_ranker)).get("/info").json()
    assert info["model_id"] == "ce" and "reranker" in info["model_type"] and len(info["models"]) == 1


def test_the_config_of_a_model_without_embeddings_is_read():
    """/info without a repository reads each model's limits from its config: a reranker has no EMBEDDING."""
    from tritonclient.grpc import service_pb2

    from serving.gateway.triton import _info

    answer = service_pb2.ModelConfigResponse()
    answer.config.max_batch_size = 1
    answer.config.output.add(name="SCORES", dims=[-1])
    assert (_info(answer).max_batch, _info(answer).hidden) == (1, 0)


def test_models_lists_every_model_the_routes_call_and_embeddings_names_the_task_of_another():
    fronted = {"embed": "docs", "rerank": "ranker", "classify": "labels"}
    http = TestClient(app.create(Gateway(GatewayConfig(model="docs"), FakeTriton(), fronted=fronted)))
    listed = schemas.ModelList.model_validate(http.get("/v1/models").json())
    assert [m.id for m in listed.data] == ["docs", "ranker", "labels"]
    r = http.post("/v1/embeddings", json={"input": "x", "model": "ranker"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"
    assert "'ranker' is a rerank model; /v1/embeddings takes ['docs']" in r.json()["error"]["message"]
    assert http.post("/v1/embeddings", json={"input": "x", "model": "nope"}).status_code == 404
    assert http.post("/v1/embeddings", json={"input": "x", "model": "docs"}).status_code == 200
    only_ranker = TestClient(app.create(Gateway(GatewayConfig(), FakeTriton(), fronted={"rerank": "ranker"})))
    assert [m["id"] for m in only_ranker.get("/v1/models").json()["data"]] == ["ranker"]
    r = only_ranker.post("/v1/embeddings", json={"input": "x", "model": "embed"})
    assert r.status_code == 404 and "serves no embedding model" in r.json()["error"]["message"]
