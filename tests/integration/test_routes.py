"""The gateway's routes over a repository of three models under names of their own, served by the real tritonserver:
the MiniLM embedder `docs` (its companions `docs_bert`, `docs_tokenizer`, ...), the seeded cross-encoder `ranker` and
the seeded classifier `labels`, exported by one `python -m export --model NAME=SPEC ...`.

Cohere/Jina's `POST /v1/rerank` ranks with the scores TEI's `/rerank` gives (equal, float for float) and eager
`transformers` computes, and refuses each bad field with its own status and message; `/info` describes all three
models; `/tokenize` tokenizes with the embedder's tokenizer although no model is called `tokenizer`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from export import checkpoint, classify, cross_encoder
from reliability import processes
from reliability.copies import linked_copy, replace_file
from tests.integration import repositories
from tests.integration.conftest import READY_TIMEOUT_S, exported, free_port
from tests.integration.repositories import MAX_SEQ
from tests.integration.test_gateway import MALFORMED, _gateway_process
from tests.integration.test_rerank import corpus
from tests.integration.test_several_models import gateway_ready

pytestmark = pytest.mark.integration

MAX_ABS_DIFF = 1e-4


@pytest.fixture(scope="module")
def repository() -> Path:
    return exported(repositories.ROUTES)


@pytest.fixture(scope="module")
def server(repository, tmp_path_factory):
    srv = processes.start(repository, tmp_path_factory.mktemp("routes") / "server.log")
    try:
        srv.wait_ready(READY_TIMEOUT_S)
        yield srv
    finally:
        processes.stop(srv)
        sys.stderr.write(f"\n----- server log -----\n{srv.log()[-5000:]}\n")


@pytest.fixture(scope="module")
def gw(server) -> httpx.Client:
    client = gateway_ready(server)
    assert client.get("/health").status_code == 200
    yield client
    client.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The cross-encoder export built (same seed), in eager transformers, and its tokenizer."""
    path = cross_encoder.build_seeded(tmp_path_factory.mktemp("ce") / "ce")
    return cross_encoder.load(path), AutoTokenizer.from_pretrained(str(path))


def _eager_logits(reference, query: str, documents: list[str]) -> np.ndarray:
    model, tok = reference
    enc = tok([query] * len(documents), documents, padding=True, truncation="longest_first", max_length=MAX_SEQ,
              return_tensors="pt")  # fmt: skip
    with torch.inference_mode():
        return model(**enc).logits[:, 0].double().numpy()


def test_v1_rerank_scores_equal_tei_rerank_and_transformers(gw, reference):
    texts = corpus()
    query = texts[5]
    documents = [*texts[20:36], " ".join(texts[:40])]  # the last past max_seq: cut, as /rerank's truncate cuts it
    sent = [d if i % 2 else {"text": d} for i, d in enumerate(documents)]  # strings and objects alike
    v1 = gw.post("/v1/rerank", json={"model": "ranker", "query": query, "documents": sent, "return_documents": True})
    assert v1.status_code == 200, v1.text
    tei = gw.post("/rerank", json={"query": query, "texts": documents, "truncate": True})
    assert tei.status_code == 200, tei.text
    results, ranks = v1.json()["results"], tei.json()
    assert [r["index"] for r in results] == [r["index"] for r in ranks]
    assert [r["relevance_score"] for r in results] == [r["score"] for r in ranks]  # float for float
    assert [r["document"]["text"] for r in results] == [documents[r["index"]] for r in results]
    expected = 1 / (1 + np.exp(-_eager_logits(reference, query, documents)))
    assert max(abs(r["relevance_score"] - expected[r["index"]]) for r in results) <= MAX_ABS_DIFF
    assert sorted(r["relevance_score"] for r in results) == [r["relevance_score"] for r in results][::-1]
    _, tok = reference
    pairs = tok([query] * len(documents), documents, truncation="longest_first", max_length=MAX_SEQ)
    assert v1.json()["usage"] == {"total_tokens": sum(len(ids) for ids in pairs["input_ids"])}
    assert v1.json()["model"] == "ranker" and v1.json()["id"]

    top = gw.post("/v1/rerank", json={"query": query, "documents": documents, "top_n": 3}).json()["results"]
    assert top == [{k: r[k] for k in ("index", "relevance_score")} for r in results[:3]]


def test_cohere_sdk_v1_and_v2_clients_rank_as_tei(gw, server):
    """Cohere's own SDK against the gateway: v1's client (``/v1/rerank``, documents returned) and v2's
    (``/v2/rerank``), their results equal to TEI's /rerank; its error for a refused field carries the message."""
    import cohere

    texts = corpus()
    query, documents = texts[7], texts[40:52]
    tei = gw.post("/rerank", json={"query": query, "texts": documents, "truncate": True}).json()
    url = f"http://{server.gateway_url}"
    v1 = cohere.Client(api_key="unused", base_url=url, timeout=30)
    one = v1.rerank(query=query, documents=documents, top_n=5, return_documents=True, model="ranker")
    assert [(r.index, r.relevance_score) for r in one.results] == [(r["index"], r["score"]) for r in tei[:5]]
    assert [r.document.text for r in one.results] == [documents[r["index"]] for r in tei[:5]]
    v2 = cohere.ClientV2(api_key="unused", base_url=url, timeout=30)
    two = v2.rerank(model="ranker", query=query, documents=documents, max_tokens_per_doc=4096)
    assert [(r.index, r.relevance_score) for r in two.results] == [(r["index"], r["score"]) for r in tei]
    with pytest.raises(cohere.core.ApiError) as e:
        v2.rerank(model="ranker", query=query, documents=documents, max_tokens_per_doc=16)
    assert e.value.status_code == 400 and "max_tokens_per_doc" in str(e.value.body)


@pytest.mark.parametrize(
    ("body", "status", "param", "says"),
    [
        ({"query": "q", "documents": []}, 400, "documents", "'documents' must not be empty"),
        ({"query": "q", "documents": ["fine", ""]}, 400, "documents", "'documents[1]' is an empty string"),
        ({"query": "q", "documents": ["fine", " \t"]}, 400, "documents", "DOCUMENTS element 1: TEXT is empty"),
        ({"query": "q", "documents": [{"title": "x"}]}, 400, "documents", "'documents[0]' must be a string or"),
        ({"query": "q", "documents": ["x" * 65537, "y"]}, 400, "documents", "DOCUMENTS element 0: TEXT element is"),
        ({"query": "q", "documents": ["d"] * 1025}, 400, "documents", "DOCUMENTS holds 1025 elements"),
        ({"query": "", "documents": ["fine"]}, 400, "query", "'query' is an empty string"),
        ({"query": ["q"], "documents": ["fine"]}, 400, "query", "'query': Input should be a valid string"),
        ({"documents": ["fine"]}, 400, "query", "'query': Field required"),
        ({"query": "q", "documents": ["fine"], "top_n": 0}, 400, "top_n", "'top_n': Input should be greater"),
        ({"query": "q", "documents": ["fine"], "max_tokens_per_doc": 64}, 400, "max_tokens_per_doc", "of 128 tokens"),
        ({"query": "q", "documents": ["fine"], "rank_fields": ["title"]}, 400, "rank_fields", "by their 'text'"),
        ({"query": "q", "documents": ["fine"], "max_chunks_per_doc": 3}, 400, "max_chunks_per_doc", "not chunked"),
        ({"query": "q", "documents": ["fine"], "return_embeddings": True}, 400, "return_embeddings", "no embeddings"),
        ({"query": "q", "documents": ["fine"], "model": "docs"}, 404, "model", "this server's reranker is 'ranker'"),
    ],
)  # fmt: skip
def test_v1_rerank_names_each_bad_field(gw, body, status, param, says):
    r = gw.post("/v1/rerank", json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == param and says in error["message"], error
    assert error["type"] == "invalid_request_error"
    assert gw.get("/health").status_code == 200


def test_v1_rerank_malformed_bodies_are_400_and_the_server_stays_up(gw):
    for body in [*MALFORMED, b'{"query": "q", "documents": "not a list"}', b'{"query": "\\ud800", "documents": ["a"]}']:
        r = gw.post("/v1/rerank", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["message"], (body[:40], r.text)
    assert gw.post("/v1/rerank", json={"query": "q", "documents": ["fine"], "max_tokens_per_doc": 4096}).is_success
    assert gw.get("/health").status_code == 200


def test_v1_rerank_is_503_where_no_reranker_is_served(server, repository, tmp_path):
    """A repository whose index lists no reranker (the same server behind it), and a server that is down."""
    copy = linked_copy(repository, tmp_path / "no-ranker")
    index = json.loads((copy / "repository.json").read_text())
    index["models"] = {m: spec for m, spec in index["models"].items() if m != "ranker"}
    replace_file(copy / "repository.json", json.dumps(index).encode())
    no_ranker, url = _gateway_process(tmp_path, server.grpc_url, "--repository", str(copy))
    down, down_url = _gateway_process(tmp_path, f"127.0.0.1:{free_port()}")
    try:
        r = httpx.post(f"{url}/v1/rerank", json={"query": "q", "documents": ["a"]}, timeout=30)
        assert r.status_code == 503 and "serves no reranker" in r.json()["error"]["message"], r.text
        assert httpx.post(f"{url}/embed", json={"inputs": "a"}, timeout=30).status_code == 200
        r = httpx.post(f"{down_url}/v1/rerank", json={"query": "q", "documents": ["a"]}, timeout=30)
        assert r.status_code == 503 and r.json()["error"]["type"] == "server_error", r.text
    finally:
        for p in (no_ranker, down):
            p.terminate()
            p.wait(10)


def test_info_describes_every_model_and_keeps_teis_shape_for_the_embedder(gw, repository):
    info = gw.get("/info").json()
    manifests = {m: json.loads((repository / m / "manifest.json").read_text()) for m in ("docs", "ranker", "labels")}
    assert info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["model_id"] == manifests["docs"]["source"] and info["max_input_length"] == MAX_SEQ
    assert info["max_batch_tokens"] == MAX_SEQ * 8 and info["auto_truncate"] is False
    assert [(m["name"], m["task"]) for m in info["models"]] == [("docs", "embed"), ("ranker", "rerank"),
                                                                 ("labels", "classify")]  # fmt: skip
    ranker, labels = info["models"][1], info["models"][2]
    assert ranker["model_type"] == {"reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}}
    id2label = {str(k): v for k, v in classify.SEEDED_LABELS.items()}
    assert labels["model_type"] == {"classifier": {"id2label": id2label, "label2id": {v: int(k) for k, v in
                                                                                        id2label.items()}}}  # fmt: skip
    assert ranker["model_id"] == manifests["ranker"]["source"] and labels["max_input_length"] == MAX_SEQ


def test_tokenize_follows_an_embedder_of_another_name(gw, repository):
    assert not (repository / "tokenizer").exists() and (repository / "docs_tokenizer").is_dir()
    tok = checkpoint.load("minilm").tokenizer
    text = "Tokenize me: Grüße aus Köln ✓"
    r = gw.post("/tokenize", json={"inputs": [text, "word " * 300]})
    assert r.status_code == 200, r.text
    short, long = r.json()
    assert [t["id"] for t in short] == tok(text)["input_ids"]
    assert [t["text"] for t in short if not t["special"]] == [text[t["start"] : t["stop"]] for t in short[1:-1]]
    assert len(long) == MAX_SEQ and long[-1] == {"id": 102, "text": "[SEP]", "special": True, "start": None,
                                                 "stop": None}  # fmt: skip
    embedded = gw.post("/v1/embeddings", json={"model": "docs", "input": text})
    assert embedded.status_code == 200 and embedded.json()["usage"]["prompt_tokens"] == len(short)
