"""The gateway on the real server: the official `openai` SDK, LangChain's OpenAIEmbeddings and TEI's documented
bodies against it; every error made on purpose; malformed bodies through every route."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from openai import APIStatusError, OpenAI
from tokenizers import Tokenizer

from serving.client import EmbedClient
from tests.integration.conftest import ROOT, free_port

pytestmark = pytest.mark.integration

TEXTS = ["hello world", "The quick brown fox jumps over the lazy dog.", "Grüße aus Köln — ünïcödé ✓"]


def _post(url: str, body: bytes | dict, headers: dict | None = None) -> tuple[int, dict, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null"), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null"), dict(e.headers)


def _get(url: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


@pytest.fixture(scope="module")
def gateway(triton_server) -> str:
    url = f"http://{triton_server.gateway_url}"
    deadline = time.monotonic() + 30
    while _get(f"{url}/health")[0] != 200:
        assert time.monotonic() < deadline, "the gateway did not become healthy"
        time.sleep(0.2)
    return url


@pytest.fixture(scope="module")
def kserve(triton_server):
    with EmbedClient(triton_server.grpc_url) as c:
        yield c


@pytest.fixture(scope="module")
def tokenizer(triton_server) -> Tokenizer:
    tok = Tokenizer.from_file(str(triton_server.repository / "tokenizer" / "1" / "tokenizer" / "tokenizer.json"))
    max_seq = json.loads((triton_server.repository / "embed" / "manifest.json").read_text())["max_seq"]
    tok.enable_truncation(max_seq)
    return tok


@pytest.fixture(scope="module")
def sdk(gateway) -> OpenAI:
    return OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0)


def test_openai_sdk_float_and_base64_equal_kserve_bit_for_bit(sdk, kserve, tokenizer):
    expected = kserve.embed(TEXTS)
    packed = sdk.embeddings.create(model="embed", input=TEXTS)  # the SDK asks for base64 by default
    plain = sdk.embeddings.create(model="embed", input=TEXTS, encoding_format="float")
    for answer in (packed, plain):
        got = np.array([d.embedding for d in answer.data], dtype=np.float32)
        assert [d.index for d in answer.data] == [0, 1, 2]
        assert np.array_equal(got, expected)
        assert answer.model == "embed" and answer.object == "list"
    tokens = sum(len(e.ids) for e in tokenizer.encode_batch(TEXTS))
    assert plain.usage.prompt_tokens == plain.usage.total_tokens == tokens


def test_openai_sdk_one_string_and_token_ids(sdk, kserve, tokenizer):
    one = sdk.embeddings.create(model="embed", input=TEXTS[1], encoding_format="float")
    assert np.array_equal(np.float32(one.data[0].embedding), kserve.embed([TEXTS[1]])[0])
    ids = [e.ids for e in tokenizer.encode_batch(TEXTS)]
    by_ids = sdk.embeddings.create(model="embed", input=ids, encoding_format="float")
    got = np.array([d.embedding for d in by_ids.data], dtype=np.float32)
    np.testing.assert_allclose(got, kserve.embed(TEXTS), atol=2e-5)
    assert by_ids.usage.prompt_tokens == sum(map(len, ids))


def test_models_lists_embed(sdk):
    assert "embed" in [m.id for m in sdk.models.list().data]


def test_langchain_openai_embeddings(gateway, kserve):
    from langchain_openai import OpenAIEmbeddings

    lc = OpenAIEmbeddings(model="embed", base_url=f"{gateway}/v1", api_key="unused", check_embedding_ctx_length=False)
    docs = lc.embed_documents(TEXTS)
    query = lc.embed_query("where is the fox?")
    np.testing.assert_allclose(np.float32(docs), kserve.embed(TEXTS), atol=1e-6)
    np.testing.assert_allclose(np.float32(query), kserve.embed(["where is the fox?"])[0], atol=1e-6)


def test_tei_embed_tokenize_info_health(gateway, kserve, tokenizer, triton_server):
    status, one, _ = _post(f"{gateway}/embed", {"inputs": "What is Deep Learning?"})
    assert status == 200 and np.array_equal(np.float32(one), kserve.embed(["What is Deep Learning?"]))
    status, many, _ = _post(f"{gateway}/embed", {"inputs": TEXTS, "normalize": True, "truncate": False})
    assert status == 200 and np.array_equal(np.float32(many), kserve.embed(TEXTS))
    status, tokens, _ = _post(f"{gateway}/tokenize", {"inputs": ["test tokenizing"], "add_special_tokens": True})
    assert status == 200 and [t["id"] for t in tokens[0]] == tokenizer.encode("test tokenizing").ids
    assert tokens[0][0] == {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None}
    assert tokens[0][1]["text"] == "test" and (tokens[0][1]["start"], tokens[0][1]["stop"]) == (0, 4)
    status, info = _get(f"{gateway}/info")
    manifest = json.loads((triton_server.repository / "embed" / "manifest.json").read_text())
    assert status == 200 and info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["max_input_length"] == manifest["max_seq"] and info["model_id"] == manifest["source"]
    assert _get(f"{gateway}/health")[0] == 200


def test_bad_elements_are_400_naming_them(gateway, sdk):
    with pytest.raises(APIStatusError) as e:
        sdk.embeddings.create(model="embed", input=["fine", ""])
    assert e.value.status_code == 400 and "input[1]" in e.value.body["message"]
    status, body, _ = _post(f"{gateway}/v1/embeddings", {"model": "embed", "input": ["fine", "a" * 70_000]})
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    assert "element 1" in body["error"]["message"]
    status, body, _ = _post(f"{gateway}/v1/embeddings", {"model": "embed", "input": [[101, 10**9, 102]]})
    assert status == 400 and "vocab" in body["error"]["message"].lower()
    status, body, _ = _post(f"{gateway}/embed", {"inputs": "word " * 1000, "truncate": False})
    assert status == 422 and body["error_type"] == "validation"
    status, body, _ = _post(f"{gateway}/embed", {"inputs": "word " * 1000, "truncate": True})
    assert status == 200


def test_a_body_over_the_limit_is_413(gateway):
    status, body, _ = _post(f"{gateway}/v1/embeddings", {"model": "embed", "input": "x" * (5 << 20)})
    assert status == 413 and body["error"]["type"] == "invalid_request_error"


def _gateway_process(tmp_path: Path, triton_url: str, *extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "serving.gateway", "--port", str(port), "--triton-url", triton_url, *extra],
        cwd=ROOT,
        stdout=(tmp_path / "gateway.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 20
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"http://127.0.0.1:{port}"
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "gateway.log").read_text()
        time.sleep(0.1)


def test_keys_401_and_a_server_down_503(triton_server, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("alice sk-alice-123\n")
    proc, url = _gateway_process(tmp_path, triton_server.grpc_url, "--api-keys", str(keys))
    down, down_url = _gateway_process(tmp_path, f"127.0.0.1:{free_port()}")
    try:
        with pytest.raises(APIStatusError) as e:
            OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0).embeddings.create(model="embed", input="x")
        assert e.value.status_code == 401 and e.value.body["code"] == "invalid_api_key"
        ok = OpenAI(base_url=f"{url}/v1", api_key="sk-alice-123", max_retries=0).embeddings.create(
            model="embed", input="x"
        )
        assert len(ok.data[0].embedding) > 0
        status, body, _ = _post(f"{down_url}/v1/embeddings", {"model": "embed", "input": "x"})
        assert status == 503 and body["error"]["type"] == "server_error"
        assert _get(f"{down_url}/health")[0] == 503
    finally:
        for p in (proc, down):
            p.terminate()
            p.wait(10)


MALFORMED = [
    b"",
    b"{",
    b"[]",
    b"null",
    b'{"input": null, "model": "embed"}',
    b'{"input": {"a": 1}, "model": "embed"}',
    b'{"input": [["a"]], "model": "embed"}',
    b'{"input": [-1], "model": "embed"}',
    b'{"input": "\\ud800", "model": "embed"}',
    b'{"input": "nul\\u0000inside", "model": "embed"}',
    b'{"input": "\xff\xfe", "model": "embed"}',
    b'{"inputs": [1, 2]}',
    b'{"inputs": "x", "normalize": "maybe"}',
    b"[" * 10_000 + b"]" * 10_000,
    bytes(range(256)),
]


@pytest.mark.parametrize("route", ["/v1/embeddings", "/embed", "/tokenize"])
def test_malformed_bodies_get_clear_errors_and_the_server_stays_up(gateway, route):
    for body in MALFORMED:
        status, answer, _ = _post(f"{gateway}{route}", body)
        assert status in (200, 400, 422), (body[:40], status, answer)
        if status != 200:
            message = answer["error"]["message"] if route.startswith("/v1") else answer["error"]
            assert message
    assert _get(f"{gateway}/health")[0] == 200


def test_loadtest_drives_the_openai_route_with_its_verdict(triton_server, gateway, tmp_path):
    from loadtest import EXIT_BREACHED, EXIT_MET
    from loadtest.__main__ import main

    short = ["--url", triton_server.gateway_url, "--protocol", "openai", "--concurrency", "2", "--duration-s", "1"]
    short += ["--warmup-s", "0.5", "--metrics-port", "0", "--no-progress", "--no-plot", "--output-dir", str(tmp_path)]
    # The model may shed some of them on a busy machine (429): the run is judged on latency here.
    assert main([*short, "--budget-ms", "10000", "--max-error-rate", "1"]) == EXIT_MET
    step = json.loads((tmp_path / "embed_closed.json").read_text())["steps"][0]
    assert step["completed"] > 0 and step["sent"] == step["completed"] + step["failed"]
    assert main([*short, "--budget-ms", "0.01"]) == EXIT_BREACHED
