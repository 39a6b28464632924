"""The classify task served natively by the real tritonserver: TEXT (and TEXT_PAIR) in, LOGITS, PROBABILITIES and
LABEL out, equal to eager `transformers` on the same classifier checkpoint (the seeded three-label MiniLM export
builds; its labels are not meaningful, only reproducible), through KServe and TEI's /predict; each bad request
refused with its own message, the server up."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
from transformers import AutoTokenizer
from tritonclient.utils import InferenceServerException

from export import classify, cross_encoder
from reliability.processes import http_status
from tests.integration import repositories
from tests.integration.conftest import exported
from tests.integration.repositories import MAX_SEQ
from tests.integration.test_rerank import (
    assert_refused_for_the_work_ahead,
    backlog_s,
    bytes_input,
    corpus,
    failures,
    hurried_behind_bulk,
    post,
    serving,
)

pytestmark = pytest.mark.integration

MAX_ABS_DIFF = 1e-4
MAX_BATCH = repositories.CLASSIFY.max_batch
LABELS = [classify.SEEDED_LABELS[i] for i in sorted(classify.SEEDED_LABELS)]


@pytest.fixture(scope="module")
def classify_repository() -> Path:
    return exported(repositories.CLASSIFY)


@pytest.fixture(scope="module")
def server(classify_repository, tmp_path_factory):
    yield from serving(classify_repository, tmp_path_factory.mktemp("classify"))


@pytest.fixture(scope="module")
def client(server):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same checkpoint as export built (same seed, same labels), in eager transformers."""
    path = cross_encoder.build_seeded(tmp_path_factory.mktemp("cls") / "cls", labels=classify.SEEDED_LABELS)
    return cross_encoder.load(path), AutoTokenizer.from_pretrained(str(path))


def served(client, texts: list[bytes], pairs: list[bytes] | None = None, **parameters):
    inputs = []
    for name, values in (("TEXT", texts), ("TEXT_PAIR", pairs)):
        if values is not None:
            inputs.append(grpcclient.InferInput(name, [len(values), 1], "BYTES"))
            inputs[-1].set_data_from_numpy(np.array([[v] for v in values], dtype=np.object_))
    result = client.infer("classify", inputs, parameters=parameters or None)
    labels = [b.decode() for b in result.as_numpy("LABEL").reshape(-1)]
    return result.as_numpy("LOGITS"), result.as_numpy("PROBABILITIES"), labels


def eager(reference, texts: list[str], pairs: list[str] | None = None, truncation="longest_first") -> np.ndarray:
    model, tok = reference
    args = (texts,) if pairs is None else (texts, pairs)
    enc = tok(*args, padding=True, truncation=truncation, max_length=MAX_SEQ, return_tensors="pt")
    with torch.inference_mode():
        return model(**enc).logits.float().numpy()


def test_served_logits_equal_eager_transformers(client, reference):
    texts = corpus()
    long_text = " ".join(texts[:40])  # past max_seq: cut as the tokenizer cuts it
    compared = 0
    for start in range(0, 64, MAX_BATCH):
        batch = texts[start : start + MAX_BATCH - 1] + [long_text]
        logits, probabilities, labels = served(client, [t.encode() for t in batch])
        expected = eager(reference, batch)
        assert logits.shape == (len(batch), len(LABELS))
        assert np.abs(logits - expected).max() <= MAX_ABS_DIFF, start
        assert np.abs(probabilities - torch.softmax(torch.from_numpy(expected), -1).numpy()).max() <= MAX_ABS_DIFF
        assert labels == [LABELS[k] for k in probabilities.argmax(axis=1)]
        compared += len(batch)
    for truncation in ("longest_first", "only_second"):
        for start in range(100, 164, MAX_BATCH):
            a = texts[start : start + MAX_BATCH]
            b = texts[start + 1 : start + MAX_BATCH] + [long_text]
            logits, _, _ = served(client, [t.encode() for t in a], [t.encode() for t in b], truncation=truncation)
            assert np.abs(logits - eager(reference, a, b, truncation)).max() <= MAX_ABS_DIFF, (truncation, start)
            compared += len(a)
    assert compared == 64 + 2 * 64


def test_a_row_does_not_depend_on_the_others(client):
    texts = [t.encode() for t in corpus()[:MAX_BATCH]]
    together = served(client, texts)[0]
    alone = np.concatenate([served(client, [t])[0] for t in texts[:4]])
    assert np.abs(together[:4] - alone).max() <= MAX_ABS_DIFF


def test_the_classify_client_gets_the_same_answers_and_errors(server, client):
    from serving.client import ClassifyClient, InvalidInput

    texts = corpus()[:6]
    with ClassifyClient(server.grpc_url, timeout_s=30) as cc:
        got = cc.classify(texts, pairs=texts[::-1])
        logits, probabilities, labels = served(client, [t.encode() for t in texts], [t.encode() for t in texts[::-1]])
        assert np.array_equal(got.logits, logits) and np.array_equal(got.probabilities, probabilities)
        assert got.labels == labels
        with pytest.raises(InvalidInput, match="TEXT element 1: TEXT is empty"):
            cc.classify(["fine", " "])
        with pytest.raises(InvalidInput, match="1 pair texts for 2 texts"):
            cc.classify(["a", "b"], pairs=["c"])


@pytest.mark.parametrize(
    ("texts", "pairs", "parameters", "message"),
    [
        ([b"fine", b" \t"], None, {}, "TEXT element 1: TEXT is empty"),
        ([b"\xff"], None, {}, "TEXT: TEXT is not valid UTF-8 (byte 0: b'\\xff')"),
        ([b"a"], [b"\xfe"], {}, "TEXT_PAIR: TEXT is not valid UTF-8"),
        ([b"a", b"b"], [b"c"], {}, "input 'TEXT' batch size does not match other inputs"),  # Triton's check
        ([b"a"], [b"b"], {"truncation": "only_first"}, 'truncation must be longest_first or only_second, got "only_first"'),
        ([b"a"], None, {"truncate": "maybe"}, "truncate must be true or false"),
        ([b"x" * (64 * 1024 + 1)], None, {}, "TEXT is 65541 bytes: more than 1 element(s) of at most 65536"),
        ([b"word " * 200], None, {"truncate": False}, "TEXT is longer than the max length of 128 tokens"),
        ([b"a", b"word " * 200], [b"b", b"c"], {"truncate": False}, "TEXT element 1 and TEXT_PAIR element 1 are longer"),
        ([b"word " * 200], [b"b"], {"truncation": "only_second"}, "TEXT fills the max length of 128 tokens"),
    ],
)  # fmt: skip
def test_a_bad_request_is_refused_with_its_reason(client, server, texts, pairs, parameters, message):
    with pytest.raises(InferenceServerException) as e:
        served(client, texts, pairs, **parameters)
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT", e.value
    assert message in e.value.message(), e.value.message()
    assert http_status(f"http://{server.http_url}/v2/health/ready") == 200


def test_a_request_whose_timeout_the_queued_work_passes_is_refused_at_once(server, reference):
    texts = corpus()
    batches = [[" ".join(texts[i + k : i + k + 6]) for k in range(MAX_BATCH)] for i in (0, 20, 40)]  # long rows
    bulk = [[bytes_input("TEXT", [t.encode() for t in batch], [MAX_BATCH, 1])] for batch in batches]
    refused_before = failures(server.metrics_url, "classify", "queue_full")
    results, outcome = hurried_behind_bulk(server, "classify", bulk, [bytes_input("TEXT", [b"short"], [1, 1])])
    assert_refused_for_the_work_ahead(outcome, "classify")
    assert failures(server.metrics_url, "classify", "queue_full") == refused_before + 1
    for batch, result in zip(batches, results, strict=True):
        assert not isinstance(result, Exception), result  # a minute to spare: served, none INTERNAL
        assert np.abs(result.as_numpy("LOGITS") - eager(reference, batch)).max() <= MAX_ABS_DIFF
    assert http_status(f"http://{server.http_url}/v2/health/ready") == 200
    assert backlog_s(server.metrics_url, "classify") == pytest.approx(0.0, abs=1e-9)


def test_more_texts_than_max_batch_are_refused_by_triton(client):
    with pytest.raises(InferenceServerException) as e:
        served(client, [b"t"] * (MAX_BATCH + 1))
    assert "batch" in e.value.message().lower()


def test_tei_predict_route_equals_eager_transformers(server, reference):
    texts = corpus()
    softmax = lambda x: torch.softmax(torch.from_numpy(x), -1).numpy()  # noqa: E731

    def check(predictions: list[dict], logits: np.ndarray, raw: bool) -> None:
        scores = logits if raw else softmax(logits)
        assert [p["label"] for p in predictions] == [LABELS[k] for k in np.argsort(-scores, kind="stable")]
        for p in predictions:
            assert abs(p["score"] - scores[LABELS.index(p["label"])]) <= MAX_ABS_DIFF

    status, single = post(server, "/predict", {"inputs": texts[0]})
    assert status == 200, single
    check(single, eager(reference, [texts[0]])[0], raw=False)
    status, pair = post(server, "/predict", {"inputs": [texts[1], texts[2]], "raw_scores": True})
    assert status == 200, pair
    check(pair, eager(reference, [texts[1]], [texts[2]])[0], raw=True)
    rows = [[t] if i % 3 else [t, texts[i + 50]] for i, t in enumerate(texts[:20])]  # mixed, > max_batch
    status, batch = post(server, "/predict", {"inputs": rows})
    assert status == 200 and len(batch) == len(rows), batch
    for row, predictions in zip(rows, batch, strict=True):
        check(predictions, eager(reference, row[:1], row[1:] or None)[0], raw=False)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"inputs": []}, "`inputs` cannot be empty"),
        ({"inputs": ""}, "'inputs[0]' is an empty string"),
        ({"inputs": [["a"], ["b", ""]]}, "'inputs[1][1]' is an empty string"),
        ({"inputs": [["a", "b", "c"]]}, "'inputs[0]' holds 3 strings"),
        ({"inputs": ["a", "b", "c"]}, "'inputs' holds 3 strings"),
        ({"inputs": "word " * 200}, "TEXT is longer than the max length of 128 tokens"),
        ({"text": "a"}, "'inputs': Field required"),
    ],
)
def test_tei_predict_route_refuses_bad_input_with_422(server, body, message):
    status, error = post(server, "/predict", body)
    assert status == 422 and message in error["error"], error
    assert http_status(f"http://{server.http_url}/v2/health/ready") == 200
