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
import struct
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from reliability import processes
from serving.python_backend import batching
from serving.python_backend.errors import RequestError
from tests.integration.conftest import http_status, native_only_copy, text_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BURST = 25  # requests per hypothesis example, sent at once
EXAMPLES = 420  # x BURST = 10,500 requests
GOAWAY_RESENDS = 2  # a call the server turned away unstarted while closing an aged connection

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

    async def _infer(self, model: str, inputs: list) -> Any:
        """The call, sent again where the server closed its aged connection before taking it (GOAWAY after
        ``--grpc-max-connection-age-s``: UNAVAILABLE, the server never saw the call), as ``serving.client`` does."""
        for resends in range(GOAWAY_RESENDS + 1):
            try:
                return await self.client.infer(model, inputs, client_timeout=60)
            except InferenceServerException as e:
                goaway = e.status() == "StatusCode.UNAVAILABLE" and "GOAWAY" in str(e.message())
                if not goaway or resends == GOAWAY_RESENDS:
                    raise

    async def _one(self, model: str, inputs: list, expected: Expected, output: str) -> str | None:
        try:
            result = await self._infer(model, inputs)
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


# Size bombs: declared sizes that lie, huge shapes, huge elements, deeply repeated word pieces. Each is sent raw
# (the client library would refuse to build most of them) and answered at once with INVALID_ARGUMENT and a message
# that says what was wrong: by Triton's own checks where they come first, else by the backend's, which reads every
# size from the request before it copies a byte. The server stays ready throughout.
def _prefixed(data: bytes, declared: int | None = None) -> bytes:
    return struct.pack("<I", len(data) if declared is None else declared) + data


def _ids(shape: list[int]) -> list[tuple[str, str, list[int]]]:
    return [("input_ids", "INT64", shape), ("attention_mask", "INT64", shape)]


ONE_ID = struct.pack("<q", 1000) * 2
SIZE_BOMBS = {
    # name: (model, inputs (name, datatype, shape), raw contents, the error's substring, our failure reason or None)
    "length prefix past the end": (
        "embed", [("TEXT", "BYTES", [1, 1])], [_prefixed(b"x" * 10, 1 << 30)], "TEXT element 0 is cut short", "bad_shape"
    ),
    "length prefix short of the end": (
        "embed", [("TEXT", "BYTES", [1, 1])], [_prefixed(b"x" * 100, 3)], "unexpected number of string elements", None
    ),
    "TEXT of 2^40 columns": (
        "embed", [("TEXT", "BYTES", [1, 2**40])], [_prefixed(b"x")], "unexpected shape for input 'TEXT'", None
    ),
    "TEXT shape whose size overflows": (
        "embed", [("TEXT", "BYTES", [2**62, 2**62])], [_prefixed(b"x")], "unexpected shape for input 'TEXT'", None
    ),
    "ids of 2^40 tokens": ("bert", _ids([1, 2**40]), [ONE_ID, ONE_ID], "input byte size mismatch", None),
    # 2^62 x 8 bytes wraps to 0 in Triton's own check, so an empty body passes it: the backend refuses the shape.
    "ids whose byte size wraps to 0": (
        "bert", _ids([1, 2**62]), [b"", b""], "sequence of 4611686018427387904 tokens is longer than the max length",
        "too_long",
    ),
    "ids of a negative length": ("bert", _ids([1, -5]), [ONE_ID, ONE_ID], "input byte size mismatch", None),
    "ids shorter than their shape": ("bert", _ids([1, 8]), [ONE_ID, ONE_ID], "input byte size mismatch", None),
}  # fmt: skip


def _raw_infer(url: str, model: str, inputs: list, raw: list[bytes], timeout_s: float = 120) -> tuple[str, Any]:
    """One ModelInfer call as sent, bypassing the client library's checks: ("OK", response) or (status, details)."""
    options = [("grpc.max_send_message_length", 2**31 - 1), ("grpc.max_receive_message_length", 2**31 - 1)]
    with grpc.insecure_channel(url, options=options) as channel:
        request = service_pb2.ModelInferRequest(model_name=model)
        for name, datatype, shape in inputs:
            request.inputs.add(name=name, datatype=datatype, shape=shape)
        request.raw_input_contents.extend(raw)
        try:
            return "OK", service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=timeout_s)
        except grpc.RpcError as e:
            return e.code().name, e.details()


@pytest.mark.parametrize("bomb", list(SIZE_BOMBS))
def test_a_size_bomb_is_refused_at_once_and_the_server_stays_up(triton_server, bomb):
    model, inputs, raw, message, reason = SIZE_BOMBS[bomb]
    if model == "embed" and not _serves_text(triton_server.repository):
        pytest.skip("the text path is not served")
    before = failure_counts(triton_server.metrics_url)
    code, details = _raw_infer(triton_server.grpc_url, model, inputs, raw)
    assert code == "INVALID_ARGUMENT" and message in details, (code, details)
    expected = collections.Counter({(model, reason): 1} if reason else {})
    deadline = time.monotonic() + 5
    while (moved := failure_counts(triton_server.metrics_url) - before) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert moved == expected  # the client's fault, never counted as internal
    assert http_status(f"http://{triton_server.http_url}/v2/health/ready") == 200


def test_a_batch_dimension_past_32_bits_is_answered_for_what_was_sent(triton_server):
    """Triton 2.51 keeps a request's batch size in 32 bits: [2^40, 1] TEXT with one element reaches the model as one
    row. Whatever the declared shape, the answer covers the element that was sent, never 2^40 rows."""
    if not _serves_text(triton_server.repository):
        pytest.skip("the text path is not served")
    code, response = _raw_infer(triton_server.grpc_url, "embed", [("TEXT", "BYTES", [2**40, 1])], [_prefixed(b"x")])
    if code != "OK":
        assert code == "INVALID_ARGUMENT", (code, response)
        return
    shapes = {o.name: list(o.shape) for o in response.outputs}
    assert shapes["EMBEDDING"] == [1, 384] and len(response.raw_output_contents[0]) == 384 * 4


def test_deeply_repeated_word_pieces_are_cut_at_max_seq_in_bounded_time(triton_server):
    """32 texts of 64 KiB, each word 100 characters that WordPiece cuts into many pieces: answered, every text
    truncated, in far less time than tokenizing all of it would take."""
    if not _serves_text(triton_server.repository):
        pytest.skip("the text path is not served")
    word = "unaffable" * 11  # 99 characters, one word of many continuation pieces
    text = ((word + " ") * (batching.MAX_TEXT_BYTES // (len(word) + 1))).encode()[: batching.MAX_TEXT_BYTES]
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    inp = grpcclient.InferInput("TEXT", [32, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[text]] * 32, dtype=np.object_))
    start = time.monotonic()
    result = client.infer("embed", [inp], client_timeout=60)
    took = time.monotonic() - start
    assert result.as_numpy("TRUNCATED").all() and result.as_numpy("EMBEDDING").shape == (32, 384)
    assert took < 10, f"32 x 64 KiB of repeated word pieces took {took:.1f} s"
    assert http_status(f"http://{triton_server.http_url}/v2/health/ready") == 200


def _memory(pid: int) -> dict[str, int]:
    text = Path(f"/proc/{pid}/status").read_text()
    return {k: int(re.search(rf"^{k}:\s+(\d+) kB", text, re.M)[1]) << 10 for k in ("VmRSS", "VmHWM")}


def test_refusing_a_1_gib_text_element_costs_no_copy_of_it(exported_repository, tmp_path):
    """The peak resident memory of tritonserver while it refuses one 1 GiB TEXT element, above its idle memory.
    Over HTTP the frontend holds the body once and the backend reads it in place: at most 1.1x the element. Over gRPC
    tritonserver 2.51's frontend holds the message twice before the backend sees it (the received buffer and the
    parsed request): bounded at 2.6x, the backend adding nothing."""
    size = 1 << 30
    element = _prefixed(b"a" * size)
    repo = native_only_copy(exported_repository, tmp_path)
    with processes.running(repo, tmp_path / "server.log") as server:
        pid = server.tritonserver_pid()
        header = json.dumps(
            {
                "inputs": [
                    {
                        "name": "TEXT",
                        "datatype": "BYTES",
                        "shape": [1, 1],
                        "parameters": {"binary_data_size": len(element)},
                    }
                ]
            }  # fmt: skip
        ).encode()
        peaks = {}
        for protocol in ("http", "grpc"):  # HTTP first: glibc keeps what gRPC's copies freed
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS
            idle = _memory(pid)["VmRSS"]
            if protocol == "http":
                request = urllib.request.Request(
                    f"http://{server.http_url}/v2/models/embed/infer",
                    data=header + element,
                    headers={
                        "Inference-Header-Content-Length": str(len(header)),
                        "Content-Type": "application/octet-stream",
                    },
                )
                with pytest.raises(urllib.error.HTTPError) as e:
                    urllib.request.urlopen(request, timeout=120)
                assert e.value.code == 400 and b"TEXT element is 1073741824 bytes; the limit is 65536" in e.value.read()
            else:
                code, details = _raw_infer(server.grpc_url, "embed", [("TEXT", "BYTES", [1, 1])], [element])
                assert code == "INVALID_ARGUMENT" and "TEXT element is 1073741824 bytes" in details, (code, details)
            peaks[protocol] = (_memory(pid)["VmHWM"] - idle) / size
            assert server.ready()
        print(f"peak above idle while refusing a 1 GiB element: {peaks}")
    assert peaks["http"] <= 1.1 and peaks["grpc"] <= 2.6, peaks
