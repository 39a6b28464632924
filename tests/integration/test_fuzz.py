"""Fuzzing the real server: 10,000+ generated `embed` and `bert` requests, each answered as an in-process oracle
predicts (an embedding, or INVALID_ARGUMENT with the oracle's message); the server stays ready throughout and
its failure counters move by exactly the rejections the oracle expects.

Each hypothesis example is a burst of requests sent concurrently over one gRPC channel, so that bad and good
requests share dynamic batches. Seeds are fixed (derandomize): a CI failure reproduces locally.
"""

from __future__ import annotations

import asyncio
import collections
import json
import re
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.utils import InferenceServerException

from serving.python_backend import batching
from serving.python_backend.errors import RequestError
from tests.integration.conftest import http_status, text_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BURST = 25  # requests per hypothesis example, sent at once
EXAMPLES = 420  # x BURST = 10,500 requests

EDGE_TEXTS = [
    "e\u0301" * 40,  # combining marks
    "\u05e9\u05dc\u05d5\u05dd \u202eabc\u202c",  # RTL text and an override
    "\U0001f469\u200d\U0001f469\u200d\U0001f467 \U0001f3f3\ufe0f\u200d\U0001f308",  # ZWJ emoji sequences
    "nul\x00inside",
    "\x00",
    "\ufeffBOM first",
    "\u200b\u200b",  # zero-width spaces only (not whitespace to str.strip)
    "\u2003\u3000\t\n",  # whitespace only
    "Z\u0351\u0362\u0329\u0301" * 200,  # zalgo
    "\U0010ffff\ue000",  # last code point, private use
    "word " * 2000,  # far past max_seq: truncated
]
NEAR_LIMIT = [b"a" * batching.MAX_TEXT_BYTES, b"a" * (batching.MAX_TEXT_BYTES + 1)]

text_element = st.one_of(
    st.binary(max_size=200),  # random bytes, mostly not UTF-8
    st.text(max_size=120).map(lambda s: s.encode("utf-8", "surrogatepass")),  # lone surrogates: invalid UTF-8
    st.sampled_from(EDGE_TEXTS).map(str.encode),
    st.sampled_from(NEAR_LIMIT),
)
text_request = st.one_of(
    st.lists(text_element, min_size=1, max_size=4),
    st.lists(text_element, min_size=33, max_size=40),  # past max_batch
)


@st.composite
def ids_request(draw, vocab: int = 30522, max_seq: int = 256) -> tuple[np.ndarray, np.ndarray]:
    rows = draw(st.sampled_from([1, 1, 2, 3, 33]))
    seq = draw(st.one_of(st.integers(1, 24), st.integers(max_seq - 2, max_seq + 2)))
    ids = draw(st.sampled_from(["valid", "edge", "wild"]))
    if ids == "valid":
        values = np.full((rows, seq), draw(st.integers(0, vocab - 1)), np.int64)
    elif ids == "edge":
        values = np.full((rows, seq), draw(st.sampled_from([-1, 0, vocab - 1, vocab, 2**63 - 1, -(2**63)])), np.int64)
    else:
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))  # whole int64 range, or near the vocabulary
        low, high = draw(st.sampled_from([(-(2**63), 2**63 - 1), (-3, vocab + 3)]))
        values = rng.integers(low, high, size=(rows, seq), dtype=np.int64, endpoint=True)
    mask_kind = draw(st.sampled_from(["ones", "ones", "padded", "zeros", "values", "other_length"]))
    if mask_kind == "ones":
        mask = np.ones((rows, seq), np.int64)
    elif mask_kind == "padded":
        mask = (np.arange(seq)[None, :] < draw(st.integers(0, seq))).repeat(rows, 0).astype(np.int64)
    elif mask_kind == "zeros":
        mask = np.zeros((rows, seq), np.int64)
    elif mask_kind == "values":
        mask = np.full((rows, seq), draw(st.sampled_from([2, -1, 2**40])), np.int64)
    else:
        mask = np.ones((rows, seq + draw(st.sampled_from([-1, 1]))), np.int64)
    return values, mask


@dataclass
class Expected:
    ok: bool
    rows: int = 0
    message: str = ""  # a substring of the error message
    reason: tuple[str, str] | None = None  # (model, reason) our failure counter moves for


def expect_text(elements: list[bytes], max_batch: int, model: str = "tokenizer") -> Expected:
    """``model``: the one that checks the texts and counts the failure (embed itself when it is native)."""
    if len(elements) > max_batch:
        return Expected(False, message="batch-size must be <=")  # Triton's own check; never reaches the models
    for raw in elements:
        try:
            batching.decode_text(raw)
        except RequestError as e:
            return Expected(False, message=str(e), reason=(model, e.reason))
    return Expected(True, rows=len(elements))


def expect_ids(ids: np.ndarray, mask: np.ndarray, manifest: dict) -> Expected:
    if ids.shape[0] > manifest["max_batch"]:
        return Expected(False, message="batch-size must be <=")
    try:
        batching.validate(ids, mask, manifest["vocab_size"], manifest["max_seq"])
    except RequestError as e:
        return Expected(False, message=str(e), reason=("bert", e.reason))
    return Expected(True, rows=ids.shape[0])


def _text_inputs(elements: list[bytes]) -> list:
    data = np.array([[e] for e in elements], dtype=np.object_)
    inp = grpcaio.InferInput("TEXT", list(data.shape), "BYTES")
    inp.set_data_from_numpy(data)
    return [inp]


def _ids_inputs(ids: np.ndarray, mask: np.ndarray) -> list:
    out = []
    for name, a in (("input_ids", ids), ("attention_mask", mask)):
        inp = grpcaio.InferInput(name, list(a.shape), "INT64")
        inp.set_data_from_numpy(a)
        out.append(inp)
    return out


def failure_counts(metrics_url: str) -> collections.Counter:
    text = urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=5).read().decode()
    counts: collections.Counter = collections.Counter()
    for m in re.finditer(r"^bertserve_failures_total\{(.*)\} (\S+)$", text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        counts[(labels["model"], labels["reason"])] += float(m.group(2))
    return counts


class Burst:
    """One event loop and one gRPC channel for every example of the run."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(self._client(url))
        self.sent = 0
        self.expected_failures: collections.Counter = collections.Counter()

    @staticmethod
    async def _client(url: str) -> grpcaio.InferenceServerClient:
        return grpcaio.InferenceServerClient(url)

    async def _one(self, model: str, inputs: list, expected: Expected, output: str) -> str | None:
        try:
            result = await self.client.infer(model, inputs, client_timeout=60)
        except InferenceServerException as e:
            if expected.ok:
                return f"{model}: expected an embedding, got {e.status()}: {e.message()}"
            if e.status() != "StatusCode.INVALID_ARGUMENT" or expected.message not in e.message():
                return f"{model}: expected INVALID_ARGUMENT with {expected.message!r}, got {e.status()}: {e.message()}"
            return None
        if not expected.ok:
            return f"{model}: expected INVALID_ARGUMENT with {expected.message!r}, got an answer"
        emb = result.as_numpy(output)
        if emb.shape[0] != expected.rows or not np.isfinite(emb).all():
            return f"{model}: answer of shape {emb.shape}, finite={np.isfinite(emb).all()}, for {expected.rows} rows"
        if not np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-3):
            return f"{model}: embeddings not unit length"
        return None

    def run(self, calls: list[tuple[str, list, Expected, str]]) -> list[str]:
        async def all_of() -> list[str | None]:
            return await asyncio.gather(*(self._one(*c) for c in calls))

        self.sent += len(calls)
        for _, _, expected, _ in calls:
            if expected.reason:
                self.expected_failures[expected.reason] += 1
        return [p for p in self.loop.run_until_complete(all_of()) if p]

    def close(self) -> None:
        self.loop.run_until_complete(self.client.close())
        self.loop.close()


def _serves_text(repository: Path) -> bool:
    """embed is served: always, but where only the native models are (the sanitizer run) and embed is the ensemble."""
    return "embed" in json.loads((repository / "repository.json").read_text())["models"]


def test_fuzzed_requests_get_the_oracles_answer_and_the_server_stays_up(triton_server):
    manifest = json.loads((triton_server.repository / "bert" / "manifest.json").read_text())
    before = failure_counts(triton_server.metrics_url)
    burst = Burst(triton_server.grpc_url)
    text_share = BURST // 2 if _serves_text(triton_server.repository) else 0

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )
    @given(
        texts=st.lists(text_request, min_size=text_share, max_size=text_share),
        ids=st.lists(ids_request(), min_size=BURST - text_share, max_size=BURST - text_share),
    )
    def burst_of(texts, ids):
        checker = text_model(triton_server.repository)
        calls = [("embed", _text_inputs(t), expect_text(t, manifest["max_batch"], checker), "EMBEDDING") for t in texts]
        calls += [("bert", _ids_inputs(i, m), expect_ids(i, m, manifest), "embedding") for i, m in ids]
        problems = burst.run(calls)
        assert not problems, problems[:5]
        assert http_status(f"http://{triton_server.http_url}/v2/health/ready") == 200, "server stopped being ready"

    try:
        burst_of()
    finally:
        burst.close()
    assert burst.sent >= 10_000 * (BURST - text_share) // BURST
    deadline = time.monotonic() + 10  # the models record counters off the request path: a scrape may lag
    while (moved := failure_counts(triton_server.metrics_url) - before) != burst.expected_failures:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert moved == burst.expected_failures, (moved, burst.expected_failures)


def test_an_oversized_message_is_refused_and_the_server_stays_up(triton_server):
    """A 64 MiB TEXT element: gRPC takes it (tritonserver 2.51 has no message-size flag), the tokenizer refuses it
    before any work, and the next request is served."""
    if not _serves_text(triton_server.repository):
        pytest.skip("the text path is not served")
    burst = Burst(triton_server.grpc_url)
    try:
        big = b"x" * (64 << 20)
        problems = burst.run(
            [("embed", _text_inputs([big]), expect_text([big], 32, text_model(triton_server.repository)), "EMBEDDING")]
            + [("embed", _text_inputs([b"still serving"]), Expected(True, rows=1), "EMBEDDING")]
        )
    finally:
        burst.close()
    assert not problems, problems
    assert http_status(f"http://{triton_server.http_url}/v2/health/ready") == 200
