"""The real tritonserver on the exported default model: round trips, accuracy, bad input, batching, metrics."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from export import checkpoint
from export.encoder import Encoder
from export.verify import sentences
from serving.client import AsyncEmbedClient, EmbedClient, InvalidInput

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def grpc(triton_server) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(triton_server.grpc_url)


@pytest.fixture(scope="module")
def manifest(triton_server) -> dict:
    return json.loads((triton_server.repository / "bert" / "manifest.json").read_text())


@pytest.fixture(scope="module")
def reference():
    """The in-process eager fp32 model and its tokenizer."""
    ckpt = checkpoint.load("minilm")
    return Encoder(ckpt.model).eval(), ckpt.tokenizer


def _text_input(texts: list, mod=grpcclient):
    data = np.array([[t] for t in texts], dtype=np.object_)
    inp = mod.InferInput("TEXT", list(data.shape), "BYTES")
    inp.set_data_from_numpy(data)
    return [inp]


def _ids_inputs(ids: np.ndarray, mask: np.ndarray, mod=grpcclient, dtype: str = "INT64"):
    a = mod.InferInput("input_ids", list(ids.shape), dtype)
    a.set_data_from_numpy(ids)
    b = mod.InferInput("attention_mask", list(mask.shape), "INT64")
    b.set_data_from_numpy(mask)
    return [a, b]


def _embed(grpc, texts, **kw) -> np.ndarray:
    return grpc.infer("embed", _text_input(texts), **kw).as_numpy("EMBEDDING")


def _metric(metrics_url: str, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if m and all(f'{k}="{v}"' in m.group(1) for k, v in labels.items()):
            total += float(m.group(2))
    return total


def _metric_reaching(metrics_url: str, name: str, target: float, timeout_s: float = 5.0, **labels: str) -> float:
    """The metric once it reaches ``target`` (the models record off the request path, a scrape may lag a
    response by milliseconds), or its value after ``timeout_s``; the caller asserts on it."""
    deadline = time.monotonic() + timeout_s
    while (value := _metric(metrics_url, name, **labels)) < target and time.monotonic() < deadline:
        time.sleep(0.02)
    return value


def test_embed_grpc_and_http_round_trip(triton_server, grpc, manifest):
    out = _embed(grpc, ["hello world", "a second text"])
    assert out.shape == (2, manifest["hidden"]) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-4)
    http = httpclient.InferenceServerClient(triton_server.http_url)
    out_http = http.infer("embed", _text_input(["hello world"], httpclient)).as_numpy("EMBEDDING")
    np.testing.assert_allclose(out_http[0], out[0], atol=1e-5)


def test_bert_with_token_ids_grpc_and_http(triton_server, grpc, reference):
    _, tok = reference
    enc = tok(["the cat sat on the mat"], return_tensors="np")
    ids, mask = enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64)
    out = grpc.infer("bert", _ids_inputs(ids, mask)).as_numpy("embedding")
    http = httpclient.InferenceServerClient(triton_server.http_url)
    out_http = http.infer("bert", _ids_inputs(ids, mask, httpclient)).as_numpy("embedding")
    np.testing.assert_allclose(out, out_http, atol=1e-5)
    assert out.shape == (1, 384)


def test_served_embeddings_match_eager_fp32(triton_server, grpc, reference, manifest):
    """Every served precision (bert and its siblings bert_<precision>) against in-process eager fp32."""
    encoder, tok = reference
    index = json.loads((triton_server.repository / "repository.json").read_text())
    models = [m for m, spec in index["models"].items() if m.startswith("bert") and spec["backend"] != "pytorch"]
    assert "bert" in models and len(models) == 2, models
    texts = sentences()
    encoded = [tok([t], truncation=True, max_length=manifest["max_seq"], return_tensors="pt") for t in texts]
    with torch.inference_mode():
        ref = torch.cat([encoder(e["input_ids"], e["attention_mask"]) for e in encoded]).numpy()
    for model in models:
        precision = json.loads((triton_server.repository / model / "manifest.json").read_text())["precision"]
        gate = {"fp32": 0.999, "int8": 0.99}[precision]
        for i, (t, enc) in enumerate(zip(texts, encoded, strict=True)):
            out = grpc.infer(model, _ids_inputs(enc["input_ids"].numpy(), enc["attention_mask"].numpy()))
            cos = float(out.as_numpy("embedding")[0] @ ref[i])
            assert cos >= gate, f"{model} ({precision}) cosine {cos:.5f} < {gate} on sentence {i}: {t[:40]!r}"


def test_embed_matches_bert_on_tokenized_text(grpc, reference):
    _, tok = reference
    enc = tok(["Der Zug nach Berlin hat Verspätung."], return_tensors="np")
    via_ids = grpc.infer("bert", _ids_inputs(enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64)))
    via_text = _embed(grpc, ["Der Zug nach Berlin hat Verspätung."])
    np.testing.assert_allclose(via_text[0], via_ids.as_numpy("embedding")[0], atol=1e-5)


def _expect_invalid(fn, *fragments: str) -> str:
    with pytest.raises(InferenceServerException) as exc:
        fn()
    message = exc.value.message()
    for f in fragments:
        assert f in message, f"{f!r} not in {message!r}"
    return str(exc.value.status())


BAD_TEXT = [
    ("empty", [b""], "empty_text", "TEXT is empty"),
    ("blank", [b"   "], "empty_text", "TEXT is empty"),
    ("not utf-8", [b"\xff\xfe bad"], "invalid_utf8", "not valid UTF-8"),
    ("over 64 KiB", [b"word " * 20000], "text_too_large", "the limit is 65536"),
]


@pytest.mark.parametrize(("case", "texts", "reason", "message"), BAD_TEXT, ids=[c[0] for c in BAD_TEXT])
def test_bad_text_is_invalid_argument_and_counted(triton_server, grpc, tokenizing_model, case, texts, reason, message):
    before = _metric(triton_server.metrics_url, "bertserve_failures_total", model=tokenizing_model, reason=reason)
    status = _expect_invalid(lambda: grpc.infer("embed", _text_input(texts)), message)
    assert status == "StatusCode.INVALID_ARGUMENT"
    url = triton_server.metrics_url
    assert (
        _metric_reaching(url, "bertserve_failures_total", before + 1, model=tokenizing_model, reason=reason)
        == before + 1
    )
    assert _embed(grpc, ["still serving"]).shape == (1, 384)


def test_bad_text_over_http_is_400(triton_server):
    body = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [""]}]}).encode()
    req = urllib.request.Request(f"http://{triton_server.http_url}/v2/models/embed/infer", data=body)
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=10)
    assert exc.value.code == 400
    assert "TEXT is empty" in exc.value.read().decode()


def test_long_text_truncated_by_default_and_rejected_on_request(triton_server, grpc, manifest, tokenizing_model):
    long_text = "word " * (manifest["max_seq"] * 2)
    result = grpc.infer("embed", _text_input([long_text]))
    assert bool(result.as_numpy("TRUNCATED")[0, 0]) is True
    assert bool(grpc.infer("embed", _text_input(["short"])).as_numpy("TRUNCATED")[0, 0]) is False
    before = _metric(triton_server.metrics_url, "bertserve_failures_total", model=tokenizing_model, reason="too_long")
    status = _expect_invalid(
        lambda: grpc.infer("embed", _text_input([long_text]), parameters={"truncate": False}), "longer than"
    )
    assert status == "StatusCode.INVALID_ARGUMENT"
    url = triton_server.metrics_url
    assert (
        _metric_reaching(url, "bertserve_failures_total", before + 1, model=tokenizing_model, reason="too_long")
        == before + 1
    )


def _ok_ids():
    return np.array([[101, 7592, 2088, 102]], np.int64), np.ones((1, 4), np.int64)


BAD_IDS = [
    ("id above vocab", np.array([[101, 999999, 102]]), np.ones((1, 3)), "bad_token_id", "outside the vocabulary"),
    ("negative id", np.array([[101, -5, 102]]), np.ones((1, 3)), "bad_token_id", "outside the vocabulary"),
    ("mask not 0/1", np.array([[101, 7592, 102]]), np.array([[1, 2, 1]]), "bad_attention_mask", "0 or 1"),
    ("mask all zero", np.array([[101, 7592, 102]]), np.zeros((1, 3)), "bad_attention_mask", "selects no token"),
    ("mask other length", np.array([[101, 7592, 102]]), np.ones((1, 2)), "bad_shape", "differs from input_ids"),
    ("too long", np.full((1, 300), 1000), np.ones((1, 300)), "too_long", "longer than the max length"),
]


@pytest.mark.parametrize(("case", "ids", "mask", "reason", "message"), BAD_IDS, ids=[c[0] for c in BAD_IDS])
def test_bad_token_ids_are_rejected_before_the_model(triton_server, grpc, case, ids, mask, reason, message):
    before = _metric(triton_server.metrics_url, "bertserve_failures_total", model="bert", reason=reason)
    inputs = _ids_inputs(ids.astype(np.int64), mask.astype(np.int64))
    status = _expect_invalid(lambda: grpc.infer("bert", inputs), message)
    assert status == "StatusCode.INVALID_ARGUMENT"
    url = triton_server.metrics_url
    assert _metric_reaching(url, "bertserve_failures_total", before + 1, model="bert", reason=reason) == before + 1
    assert grpc.infer("bert", _ids_inputs(*_ok_ids())).as_numpy("embedding").shape == (1, 384)


def test_triton_answers_wrong_dtype_rank_batch_and_model_clearly(grpc, manifest):
    ids, mask = _ok_ids()
    wrong_dtype = _ids_inputs(ids.astype(np.int32), mask, dtype="INT32")
    _expect_invalid(lambda: grpc.infer("bert", wrong_dtype), "input_ids", "INT32", "INT64")
    wrong_rank = _ids_inputs(ids.reshape(1, 1, 4), mask.reshape(1, 1, 4))
    _expect_invalid(lambda: grpc.infer("bert", wrong_rank), "unexpected shape", "Expected [-1,-1]")
    big = manifest["max_batch"] + 1
    _expect_invalid(lambda: grpc.infer("embed", _text_input(["x"] * big)), "batch", str(manifest["max_batch"]))
    with pytest.raises(InferenceServerException) as exc:
        grpc.infer("no_such_model", _text_input(["x"]))
    assert "no_such_model" in exc.value.message()
    assert grpc.infer("bert", _ids_inputs(ids, mask)).as_numpy("embedding").shape == (1, 384)


def test_good_requests_batched_with_bad_ones_succeed(triton_server):
    """Concurrent requests land in shared dynamic batches; the bad ones fail alone."""

    async def run() -> tuple[list, float]:
        client = grpcaio.InferenceServerClient(triton_server.grpc_url)
        before = _metric(triton_server.metrics_url, "bertserve_batch_size_count", model="bert")
        before_sum = _metric(triton_server.metrics_url, "bertserve_batch_size_sum", model="bert")
        good_ids, good_mask = _ok_ids()
        calls = []
        for i in range(48):
            ids = good_ids.copy()
            if i % 3 == 0:
                ids[0, 1] = 10**7  # out of vocabulary
            inputs = _ids_inputs(ids, good_mask, mod=grpcaio)
            calls.append(client.infer("bert", inputs))
        results = await asyncio.gather(*calls, return_exceptions=True)
        await client.close()
        good = 48 - len(range(0, 48, 3))
        rows = _metric_reaching(triton_server.metrics_url, "bertserve_batch_size_sum", before_sum + good, model="bert")
        rows -= before_sum
        batches = _metric(triton_server.metrics_url, "bertserve_batch_size_count", model="bert") - before
        return results, rows / max(batches, 1)

    results, mean_batch = asyncio.run(run())
    for i, r in enumerate(results):
        if i % 3 == 0:
            assert isinstance(r, InferenceServerException) and "outside the vocabulary" in r.message()
        else:
            assert not isinstance(r, Exception), r
            assert r.as_numpy("embedding").shape == (1, 384)
    assert mean_batch > 1.0, "requests were never batched together"


def test_batch_invariance_across_compositions(grpc):
    text = "The quick brown fox jumps over the lazy dog."
    alone = _embed(grpc, [text])[0]
    with_short = _embed(grpc, [text, "hi", "ok"])[0]
    with_long = _embed(grpc, ["a much longer sentence " * 20, text, "x"])[1]
    for other in (with_short, with_long):
        assert float(alone @ other) >= 0.9999


def test_client_module_sync_async_and_errors(triton_server):
    with EmbedClient(triton_server.grpc_url) as c:
        a = c.embed(["hello world"])
        with pytest.raises(InvalidInput, match="TEXT is empty"):
            c.embed([""])
    with EmbedClient(triton_server.http_url, protocol="http") as c:
        b = c.embed(["hello world"])
        with pytest.raises(InvalidInput):
            c.embed([""])

    async def run():
        async with AsyncEmbedClient(triton_server.grpc_url, timeout_s=5) as c:
            return await c.embed(["hello world"])

    np.testing.assert_allclose(a, b, atol=1e-5)
    np.testing.assert_allclose(asyncio.run(run()), a, atol=1e-5)


def test_custom_metrics_on_the_metrics_port(triton_server, grpc, tokenizing_model):
    encoder = "embed" if tokenizing_model == "embed" else "bert"  # the model whose forward serves embed
    before = _metric(triton_server.metrics_url, "bertserve_request_duration_seconds_count", model=encoder)
    tokens_before = _metric(triton_server.metrics_url, "bertserve_tokens_total", model=encoder)
    _embed(grpc, ["count me"])
    count = "bertserve_request_duration_seconds_count"
    assert _metric_reaching(triton_server.metrics_url, count, before + 1, model=encoder) == before + 1
    assert _metric(triton_server.metrics_url, "bertserve_tokens_total", model=encoder) > tokens_before
    text = urllib.request.urlopen(f"http://{triton_server.metrics_url}/metrics", timeout=5).read().decode()
    assert f'bertserve_request_duration_seconds_bucket{{model="{encoder}",le="0.01"}}' in text
    for stage in ("collate", "infer", "respond"):
        assert f'bertserve_stage_duration_seconds_count{{model="{encoder}",stage="{stage}"}}' in text
    assert f'bertserve_stage_duration_seconds_count{{model="{tokenizing_model}",stage="tokenize"}}' in text
    assert "bertserve_padding_ratio_bucket" in text and "bertserve_batch_size_bucket" in text
    assert 'nv_inference_request_success{model="embed"' in text
