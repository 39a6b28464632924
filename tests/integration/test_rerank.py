"""The rerank task served natively by the real tritonserver: QUERY and DOCUMENTS in, SCORES out, equal to eager
`transformers` on the same cross-encoder checkpoint (the seeded MiniLM cross-encoder export builds; its scores are
not meaningful relevance, only reproducible), and each bad request refused with its own message, the server up."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from transformers import AutoTokenizer
from tritonclient.utils import InferenceServerException

from export import cross_encoder
from reliability.processes import http_status
from tests.integration import repositories
from tests.integration.conftest import (
    READY_TIMEOUT_S,
    ROOT,
    exported,
    served_counts,
    start_server,
    stop_server,
    wait_ready,
)
from tests.integration.repositories import MAX_SEQ

pytestmark = pytest.mark.integration

MAX_ABS_DIFF = 1e-4


def serving(repository: Path, log_dir: Path):
    """A server of the repository, ready, until the generator closes (its log printed then)."""
    srv = start_server(repository, log_dir / "tritonserver.log")
    try:
        wait_ready(srv.http_url, srv.process, READY_TIMEOUT_S)
        yield srv
    finally:
        stop_server(srv)
        sys.stderr.write(f"\n----- tritonserver log -----\n{srv.log()[-5000:]}\n")


@pytest.fixture(scope="module")
def rerank_repository() -> Path:
    return exported(repositories.RERANK)


@pytest.fixture(scope="module")
def server(rerank_repository, tmp_path_factory):
    yield from serving(rerank_repository, tmp_path_factory.mktemp("rerank"))


@pytest.fixture(scope="module")
def client(server):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same checkpoint as export built (same seed), in eager transformers."""
    path = cross_encoder.build_seeded(tmp_path_factory.mktemp("ce") / "ce")
    return cross_encoder.load(path), AutoTokenizer.from_pretrained(str(path))


def rerank(client, query: bytes, documents: list[bytes], **parameters) -> np.ndarray:
    q = grpcclient.InferInput("QUERY", [1, 1], "BYTES")
    q.set_data_from_numpy(np.array([[query]], dtype=np.object_))
    d = grpcclient.InferInput("DOCUMENTS", [1, len(documents)], "BYTES")
    d.set_data_from_numpy(np.array([documents], dtype=np.object_))
    result = client.infer("rerank", [q, d], parameters=parameters or None)
    return result.as_numpy("SCORES").reshape(-1)


def eager(reference, query: str, documents: list[str], truncation: str) -> np.ndarray:
    model, tok = reference
    enc = tok([query] * len(documents), documents, padding=True, truncation=truncation, max_length=MAX_SEQ,
              return_tensors="pt")  # fmt: skip
    with torch.inference_mode():
        return model(**enc).logits[:, 0].float().numpy()


def corpus() -> list[str]:
    lines = (ROOT / "loadtest/data/corpus.txt").read_text().splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def test_served_scores_equal_eager_transformers(client, reference):
    texts = corpus()
    long_document = " ".join(texts[:40])  # past max_seq: cut as longest_first / only_second cut it
    cases = [(texts[i], texts[i + 1 : i + 33] + [long_document]) for i in (0, 50, 100)]
    compared = 0
    for truncation in ("longest_first", "only_second"):
        for query, documents in cases:
            served = rerank(client, query.encode(), [d.encode() for d in documents], truncation=truncation)
            expected = eager(reference, query, documents, truncation)
            assert served.shape == (len(documents),)
            assert np.abs(served - expected).max() <= MAX_ABS_DIFF, (truncation, query)
            compared += len(documents)
    assert compared == 2 * 3 * 33
    # a long query cut with its documents (longest_first)
    query = " ".join(texts[:30])
    served = rerank(client, query.encode(), [texts[0].encode(), long_document.encode()])
    assert np.abs(served - eager(reference, query, [texts[0], long_document], "longest_first")).max() <= MAX_ABS_DIFF


def test_the_rerank_client_gets_the_same_scores_and_errors(server, client):
    from serving.client import InvalidInput, RerankClient

    docs = corpus()[:8]
    with RerankClient(server.grpc_url, timeout_s=30) as rc:
        scores = rc.rerank("a question", docs, truncation="only_second")
        assert np.array_equal(scores, rerank(client, b"a question", [d.encode() for d in docs]))
        with pytest.raises(InvalidInput, match="DOCUMENTS element 1: TEXT is empty"):
            rc.rerank("a question", ["fine", " "])


def test_warm_up_requests_are_not_counted_as_served(rerank_repository, tmp_path):
    """As embed's: Triton's warm-up requests stay out of the success count and the request histogram the SLO reads;
    the first client request counts as one."""
    assert "model_warmup" in (rerank_repository / "rerank" / "config.pbtxt").read_text()
    for srv in serving(rerank_repository, tmp_path):
        assert served_counts(srv.metrics_url, "rerank") == (0, 0)
        with grpcclient.InferenceServerClient(srv.grpc_url) as c:
            rerank(c, b"the first query", [b"the first client request"])
        assert served_counts(srv.metrics_url, "rerank", (1, 1)) == (1, 1)


def test_scores_do_not_depend_on_the_other_documents(client):
    docs = [t.encode() for t in corpus()[:20]]
    together = rerank(client, b"where is the nearest station", docs)
    alone = np.array([rerank(client, b"where is the nearest station", [d])[0] for d in docs[:5]])
    assert np.abs(together[:5] - alone).max() <= MAX_ABS_DIFF


@pytest.mark.parametrize(
    ("query", "documents", "parameters", "message"),
    [
        (b"q", [b"fine", b" \t"], {}, "DOCUMENTS element 1: TEXT is empty"),
        (b"\xff", [b"fine"], {}, "QUERY: TEXT is not valid UTF-8 (byte 0: b'\\xff')"),
        (b"q", [b"fine"], {"truncation": "only_first"}, 'truncation must be longest_first or only_second, got "only_first"'),
        (b"q", [b"fine"], {"truncate": "maybe"}, "truncate must be true or false"),
        (b"q", [b"x" * (64 * 1024 + 1)], {}, "DOCUMENTS is 65541 bytes: more than 1 element(s) of at most 65536"),
        (b"q", [b"x" * (64 * 1024 + 1), b"y"], {}, "DOCUMENTS element 0: TEXT element is 65537 bytes; the limit"),
        (b"word " * 200, [b"fine"], {"truncation": "only_second"}, "QUERY fills the max length of 128 tokens"),
        (b"q", [b"word " * 200], {"truncate": False}, "QUERY and DOCUMENTS element 0 are longer than the max length"),
        (b"q", [b"d"] * 1025, {}, "DOCUMENTS holds 1025 elements; the limit is 1024"),
    ],
)  # fmt: skip
def test_a_bad_request_is_refused_with_its_reason(client, server, query, documents, parameters, message):
    with pytest.raises(InferenceServerException) as e:
        rerank(client, query, documents, **parameters)
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT", e.value
    assert message in e.value.message(), e.value.message()
    assert http_status(f"http://{server.http_url}/v2/health/ready") == 200


def test_a_request_without_documents_is_refused(client):
    q = grpcclient.InferInput("QUERY", [1, 1], "BYTES")
    q.set_data_from_numpy(np.array([[b"q"]], dtype=np.object_))
    with pytest.raises(InferenceServerException) as e:
        client.infer("rerank", [q])
    assert "DOCUMENTS" in e.value.message()


def post(server, path: str, body: dict) -> tuple[int, object]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"http://{server.gateway_url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def backlog_s(metrics_url: str, model: str) -> float | None:
    """The model's bertserve_queue_backlog_seconds (predicted work queued and in flight), None when not published."""
    text = urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=5).read().decode()
    found = re.search(r'^bertserve_queue_backlog_seconds\{model="' + model + r'"\} (\S+)$', text, re.M)
    return float(found[1]) if found else None


def hurried_behind_bulk(server, model: str, bulk: list[list], hurried: list) -> tuple[list, str]:
    """The `bulk` requests (each its InferInputs) sent at once with a minute's timeout each, then, once the backlog
    gauge shows work admitted, one request with a 1 ms timeout: the bulk's results (an exception where one
    failed) and the hurried request's status and message ("ok" if it was served)."""

    async def run() -> tuple[list, str]:
        client = grpcaio.InferenceServerClient(server.grpc_url)
        try:
            sent = [asyncio.ensure_future(client.infer(model, inputs, timeout=60_000_000)) for inputs in bulk]
            deadline = time.monotonic() + 30
            while not (await asyncio.to_thread(backlog_s, server.metrics_url, model) or 0) > 0:
                assert time.monotonic() < deadline, "the bulk never showed in the backlog gauge"
                await asyncio.sleep(0.005)
            try:
                await client.infer(model, hurried, timeout=1000)
                outcome = "ok"
            except InferenceServerException as e:
                outcome = f"{e.status()}: {e.message()}"
            return await asyncio.gather(*sent, return_exceptions=True), outcome
        finally:
            await client.close()

    return asyncio.run(run())


def bytes_input(name: str, values: list[bytes], shape: list[int]) -> grpcaio.InferInput:
    tensor = grpcaio.InferInput(name, shape, "BYTES")
    tensor.set_data_from_numpy(np.array(values, dtype=np.object_).reshape(shape))
    return tensor


def assert_refused_for_the_work_ahead(outcome: str, model: str) -> None:
    assert outcome.startswith(f"StatusCode.UNAVAILABLE: {model} is overloaded: "), outcome
    assert re.search(r"\d+\.\d ms of work is queued ahead of this request", outcome), outcome
    assert "past its deadline of 1.0 ms" in outcome, outcome


def failures(metrics_url: str, model: str, reason: str) -> float:
    text = urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=5).read().decode()
    found = re.search(rf'^bertserve_failures_total{{model="{model}",reason="{reason}"}} (\S+)$', text, re.M)
    assert found, f"no bertserve_failures_total for {model} {reason}"
    return float(found[1])


def test_a_request_whose_timeout_the_queued_work_passes_is_refused_at_once(server, reference):
    texts = corpus()
    documents = [" ".join(texts[i : i + 4]) for i in range(32)]  # 32 pairs of some 60-100 tokens
    queries = [texts[40 + k] for k in range(4)]
    bulk = [
        [bytes_input("QUERY", [q.encode()], [1, 1]), bytes_input("DOCUMENTS", [d.encode() for d in documents], [1, 32])]
        for q in queries
    ]
    hurried = [bytes_input("QUERY", [b"q"], [1, 1]), bytes_input("DOCUMENTS", [b"a short document"], [1, 1])]
    refused_before = failures(server.metrics_url, "rerank", "queue_full")
    started = time.monotonic()
    results, outcome = hurried_behind_bulk(server, "rerank", bulk, hurried)
    assert_refused_for_the_work_ahead(outcome, "rerank")
    assert failures(server.metrics_url, "rerank", "queue_full") == refused_before + 1
    for query, result in zip(queries, results, strict=True):
        assert not isinstance(result, Exception), result  # a minute to spare: served, none INTERNAL
        served = result.as_numpy("SCORES").reshape(-1)
        assert np.abs(served - eager(reference, query, documents, "longest_first")).max() <= MAX_ABS_DIFF
    assert time.monotonic() - started < 60
    assert http_status(f"http://{server.http_url}/v2/health/ready") == 200
    assert backlog_s(server.metrics_url, "rerank") == pytest.approx(0.0, abs=1e-9)  # nothing queued or in flight


def test_sigterm_serves_the_queued_requests_before_the_server_exits(rerank_repository, tmp_path):
    """The backend's queue, not Triton's, holds the requests: unloading drains it, each request answered."""
    srv = start_server(rerank_repository, tmp_path / "tritonserver.log")
    try:
        wait_ready(srv.http_url, srv.process, READY_TIMEOUT_S)
        documents = [t.encode() for t in corpus()[:32]]

        async def run() -> tuple[int, list]:
            client = grpcaio.InferenceServerClient(srv.grpc_url)
            inputs = [bytes_input("QUERY", [b"a query"], [1, 1]), bytes_input("DOCUMENTS", documents, [1, 32])]
            await client.infer("rerank", inputs)  # connected before the burst
            burst = [asyncio.ensure_future(client.infer("rerank", inputs, timeout=60_000_000)) for _ in range(6)]
            _, pending = await asyncio.wait(burst, return_when=asyncio.FIRST_COMPLETED)
            srv.process.send_signal(signal.SIGTERM)
            results = await asyncio.gather(*burst, return_exceptions=True)
            await client.close()
            return len(pending), results

        in_flight, results = asyncio.run(run())
        assert in_flight > 0, "every request finished before SIGTERM: nothing was left to drain"
        assert not [r for r in results if isinstance(r, Exception)], results
        assert all(np.array_equal(r.as_numpy("SCORES"), results[0].as_numpy("SCORES")) for r in results)
        assert srv.process.wait(timeout=60) == 0
    finally:
        stop_server(srv)


def test_tei_rerank_route_ranks_by_the_models_scores(server, reference):
    texts = corpus()
    query, documents = texts[3], texts[10:26]
    logits = eager(reference, query, documents, "longest_first")
    status, ranks = post(server, "/rerank", {"query": query, "texts": documents, "return_text": True})
    assert status == 200, ranks
    assert [r["index"] for r in ranks] == sorted(range(len(documents)), key=lambda i: -logits[i])
    for r in ranks:
        assert abs(r["score"] - 1 / (1 + np.exp(-logits[r["index"]]))) <= MAX_ABS_DIFF
        assert r["text"] == documents[r["index"]]
    status, raw = post(server, "/rerank", {"query": query, "texts": documents, "raw_scores": True})
    assert status == 200 and all(abs(r["score"] - logits[r["index"]]) <= MAX_ABS_DIFF for r in raw)
    assert "text" not in raw[0]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"query": "q", "texts": []}, "`texts` cannot be empty"),
        ({"query": "q", "texts": ["fine", ""]}, "'texts[1]' is an empty string"),
        ({"query": "", "texts": ["fine"]}, "'query' is an empty string"),
        ({"query": "q", "texts": ["word " * 200]}, "QUERY and DOCUMENTS element 0 are longer than the max length"),
        ({"query": "q", "texts": ["fine"], "truncation_direction": "Left"}, "truncation_direction=Left"),
        ({"query": "q"}, "'texts': Field required"),
    ],
)
def test_tei_rerank_route_refuses_bad_input_with_422(server, body, message):
    status, error = post(server, "/rerank", body)
    assert status == 422 and message in error["error"], error
