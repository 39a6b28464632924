"""Two checkpoints in one repository, served by one real tritonserver: the MiniLM embedder (`embed`) and the seeded
cross-encoder (`rerank`), exported by one `python -m export --model NAME=SPEC --model NAME=SPEC`.

Each model is ready on its own and answers as its single-model export does (embeddings equal to eager MiniLM's,
scores equal to eager `transformers`'), through KServe and the gateway's routes; the gateway's /health is 200 for the
mixed repository and for a rerank-only one."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
from transformers import AutoTokenizer

from export import checkpoint, cross_encoder
from reliability import processes
from reliability.copies import linked_copy, replace_file
from tests.integration import repositories
from tests.integration.conftest import READY_TIMEOUT_S, exported
from tests.integration.repositories import MAX_SEQ

pytestmark = pytest.mark.integration

TEXTS = ["The quick brown fox jumps over the lazy dog.", "Stock markets fell sharply today.", "Le chat dort."]
QUERY = "what does the fox jump over"


@pytest.fixture(scope="module")
def repository() -> Path:
    return exported(repositories.TWO_MODELS)


def _serve(repository: Path, log_path: Path):
    server = processes.start(repository, log_path)
    try:
        server.wait_ready(READY_TIMEOUT_S)
    except BaseException:
        processes.stop(server)
        raise
    return server


@pytest.fixture(scope="module")
def server(repository, tmp_path_factory):
    srv = _serve(repository, tmp_path_factory.mktemp("two-models") / "server.log")
    try:
        yield srv
    finally:
        processes.stop(srv)
        sys.stderr.write(f"\n----- server log -----\n{srv.log()[-5000:]}\n")


def gateway_ready(srv: processes.ServerProcess, timeout_s: float = 60) -> httpx.Client:
    """The gateway's client once its port answers (it starts beside tritonserver)."""
    client = httpx.Client(base_url=f"http://{srv.gateway_url}", timeout=30)
    for _ in range(int(timeout_s * 10)):
        try:
            client.get("/health")
            return client
        except httpx.TransportError:
            time.sleep(0.1)
    raise TimeoutError("the gateway never answered")


def test_the_index_names_both_entry_points_with_their_tasks(repository):
    index = json.loads((repository / "repository.json").read_text())
    tasks = {m: s["task"] for m, s in index["models"].items() if "task" in s}
    assert tasks == {"embed": "embed", "rerank": "rerank"}
    assert set(index["specs"]) == {"embed", "rerank"} and index["served"] == {"bert": "fp32", "rerank": "fp32"}
    assert {"bert", "tokenizer", "embed", "rerank"} <= set(index["models"])


def test_each_model_is_ready_on_its_own(server):
    for model in ("embed", "rerank", "bert", "tokenizer"):
        assert server.http_status(f"/v2/models/{model}/ready") == 200, model
    assert server.http_status("/v2/health/ready") == 200
    assert "entry points: embed (embed), rerank (rerank)" in server.log()


def _eager_embeddings(texts: list[str]) -> np.ndarray:
    ckpt = checkpoint.load("minilm")
    enc = ckpt.tokenizer(texts, padding=True, truncation=True, max_length=MAX_SEQ, return_tensors="pt")
    with torch.inference_mode():
        hidden = ckpt.model(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


def _eager_scores(query: str, documents: list[str], tmp: Path) -> np.ndarray:
    path = cross_encoder.build_seeded(tmp / "ce")
    model, tok = cross_encoder.load(path), AutoTokenizer.from_pretrained(str(path))
    enc = tok([query] * len(documents), documents, padding=True, truncation="longest_first", max_length=MAX_SEQ,
              return_tensors="pt")  # fmt: skip
    with torch.inference_mode():
        return model(**enc).logits[:, 0].numpy()


def test_both_models_answer_through_kserve_as_their_references(server, tmp_path):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        text = grpcclient.InferInput("TEXT", [len(TEXTS), 1], "BYTES")
        text.set_data_from_numpy(np.array([[t.encode()] for t in TEXTS], dtype=np.object_))
        embeddings = client.infer("embed", [text]).as_numpy("EMBEDDING")
        q = grpcclient.InferInput("QUERY", [1, 1], "BYTES")
        q.set_data_from_numpy(np.array([[QUERY.encode()]], dtype=np.object_))
        d = grpcclient.InferInput("DOCUMENTS", [1, len(TEXTS)], "BYTES")
        d.set_data_from_numpy(np.array([[t.encode() for t in TEXTS]], dtype=np.object_))
        scores = client.infer("rerank", [q, d]).as_numpy("SCORES").reshape(-1)
    finally:
        client.close()
    assert embeddings.shape == (len(TEXTS), 384)
    assert np.min(np.sum(embeddings * _eager_embeddings(TEXTS), axis=1)) > 0.999
    assert np.max(np.abs(scores - _eager_scores(QUERY, TEXTS, tmp_path))) <= 1e-4


def test_the_gateway_serves_both_routes_and_is_healthy(server, tmp_path):
    gw = gateway_ready(server)
    assert gw.get("/health").status_code == 200
    embedded = gw.post("/embed", json={"inputs": TEXTS})
    assert embedded.status_code == 200 and np.asarray(embedded.json()).shape == (len(TEXTS), 384)
    ranked = gw.post("/rerank", json={"query": QUERY, "texts": TEXTS, "raw_scores": True})
    assert ranked.status_code == 200, ranked.text
    expected = _eager_scores(QUERY, TEXTS, tmp_path)
    assert [r["index"] for r in ranked.json()] == list(np.argsort(-expected, kind="stable"))
    assert max(abs(r["score"] - expected[r["index"]]) for r in ranked.json()) <= 1e-4
    openai = gw.post("/v1/embeddings", json={"model": "embed", "input": TEXTS[0]})
    assert openai.status_code == 200 and len(openai.json()["data"][0]["embedding"]) == 384


def test_a_rerank_only_repository_is_healthy_at_the_gateway(repository, tmp_path):
    """The repository as a rerank-only export lays it out: only `rerank` listed. Its gateway /health is 200 (it
    used to ask for `embed`, which such a repository has not), /rerank answers and /embed says what is missing."""
    copy = linked_copy(repository, tmp_path / "rerank-only")
    index = json.loads((copy / "repository.json").read_text())
    index["models"] = {"rerank": index["models"]["rerank"]}
    index["ensemble_requires"] = {}
    replace_file(copy / "repository.json", json.dumps(index).encode())
    srv = _serve(copy, tmp_path / "server.log")
    try:
        gw = gateway_ready(srv)
        assert gw.get("/health").status_code == 200
        assert gw.post("/rerank", json={"query": QUERY, "texts": TEXTS}).status_code == 200
        missing = gw.post("/embed", json={"inputs": TEXTS})
        assert missing.status_code >= 400 and "embed" in missing.text
        assert srv.http_status("/v2/models/embed/ready") != 200
    finally:
        processes.stop(srv)
