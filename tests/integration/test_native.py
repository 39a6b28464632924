"""What only the native encoder backend does: the TorchScript runtime, and load shedding in the backend."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from export.model_configs import QueuePolicy
from reliability import processes
from reliability.copies import linked_copy, record_config, replace_file, rewrite_config
from serving.contract import native
from serving.contract.manifest import sha256
from tests.integration.conftest import NATIVE_ONLY, native_only_copy, served_counts

pytestmark = pytest.mark.integration
CORPUS = Path(__file__).resolve().parents[2] / "loadtest" / "data" / "corpus.txt"


def _ids_inputs(ids: np.ndarray, mod=grpcclient) -> list:
    inputs = []
    for name, array in (("input_ids", ids), ("attention_mask", np.ones_like(ids))):
        i = mod.InferInput(name, list(array.shape), "INT64")
        i.set_data_from_numpy(array)
        inputs.append(i)
    return inputs


def test_the_sibling_model_is_native(exported_repository, side_model):
    index = json.loads((exported_repository / "repository.json").read_text())
    assert index["models"]["bert"]["backend"] == index["models"][side_model]["backend"] == native.NAME


def test_torchscript_artifact_serves_the_same_embeddings(exported_repository, triton_server, tmp_path):
    """The fp32 model from its TorchScript file (the manifest names the runtime) against its AOTInductor package."""
    repo = linked_copy(exported_repository, tmp_path / "repo")
    # bert itself when fp32 serves it (int8 refused by the retrieval gate), else bert_fp32
    fp32 = "bert" if json.loads((repo / "repository.json").read_text())["served"]["bert"] == "fp32" else "bert_fp32"
    manifest = json.loads((repo / fp32 / "manifest.json").read_text())
    assert "torchscript" in manifest["artifacts"]
    replace_file(repo / fp32 / "manifest.json", json.dumps({**manifest, "runtime": "torchscript"}).encode())
    ids = np.random.default_rng(0).integers(1000, 2000, (3, 21))
    aoti = grpcclient.InferenceServerClient(triton_server.grpc_url).infer(fp32, _ids_inputs(ids))
    with processes.running(repo, tmp_path / "server.log") as server:
        script = grpcclient.InferenceServerClient(server.grpc_url).infer(fp32, _ids_inputs(ids))
        assert f"{fp32}: fp32 torchscript artifact" in server.log()
    a, b = aoti.as_numpy("embedding"), script.as_numpy("embedding")
    assert (np.sum(a * b, axis=1) >= 0.9999).all()


async def _gauge(metrics_url: str, model: str, gauge: str = "queue_backlog_seconds") -> float:
    """The model's bertserve_queue_backlog_seconds (the predicted work queued and in flight), or another of its
    ``bertserve_`` gauges; 0 when not published."""
    text = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://{metrics_url}/metrics").read().decode())
    found = re.search(rf'^bertserve_{gauge}\{{model="{model}"\}} (\S+)$', text, re.M)
    return float(found[1]) if found else 0.0


async def _burst(
    url: str, n: int, tokens: int, timeout_us: int | None = None, behind: int = 0, metrics_url: str = ""
) -> list[str]:
    """n concurrent requests to bert, sent ``behind`` > 0 ms after a request of 32 x 128 tokens that keeps the
    model busy (and, with ``metrics_url``, once the backlog gauge shows it admitted); "ok" or each refusal's status
    and message (the busy request's outcome is not returned)."""
    client = grpcaio.InferenceServerClient(url)

    async def one(rows: int, length: int, timeout: int | None) -> str:
        try:
            await client.infer("bert", _ids_inputs(np.full((rows, length), 1000, np.int64), grpcaio), timeout=timeout)
            return "ok"
        except InferenceServerException as e:
            return f"{e.status()}: {e.message()}"

    try:
        busy = asyncio.ensure_future(one(32, 128, None)) if behind else None
        await asyncio.sleep(behind / 1000)
        for _ in range(200):  # a busy machine may take longer than `behind` to admit it
            if not metrics_url or await _gauge(metrics_url, "bert") > 0:
                break
            await asyncio.sleep(0.01)
        out = await asyncio.gather(*[one(1, tokens, timeout_us) for _ in range(n)])
        if busy is not None:
            await busy
        return out
    finally:
        await client.close()


@pytest.mark.slow
def test_requests_are_admitted_by_queued_work_against_their_deadline(exported_repository, tmp_path):
    repo = linked_copy(exported_repository, tmp_path / "repo")
    rewrite_config(repo / "bert", QueuePolicy(max_queue_size=1, timeout_us=20_000))  # a 20 ms default deadline
    with processes.running(repo, tmp_path / "server.log") as server:
        # 128 requests of 128 tokens at once: far more than 20 ms of work on a CPU. The first finds nothing ahead.
        crowd = asyncio.run(_burst(server.grpc_url, 128, 128))
        # The same with a minute to spare each: a bulk client waits and is served.
        bulk = asyncio.run(_burst(server.grpc_url, 64, 128, timeout_us=60_000_000, behind=5))
        # A client's own deadline shorter than the work ahead of it: refused at once.
        hurried = asyncio.run(_burst(server.grpc_url, 2, 16, timeout_us=1000, behind=5, metrics_url=server.metrics_url))
        after = asyncio.run(_burst(server.grpc_url, 1, 16))
        deadline_s = asyncio.run(_gauge(server.metrics_url, "bert", "deadline_seconds"))
    assert deadline_s == 0.02  # published for the saturation alert, which compares the backlog with it
    refused = [r for r in crowd if r != "ok"]
    assert "ok" in crowd and refused, crowd
    assert all(r.startswith("StatusCode.UNAVAILABLE: bert is overloaded: ") for r in refused), refused
    assert all("ms of work is queued ahead of this request" in r and "past its deadline of" in r for r in refused)
    assert bulk == ["ok"] * 64, [r for r in bulk if r != "ok"][:3]
    assert hurried and all("UNAVAILABLE" in r and "deadline of 1.0 ms" in r for r in hurried), hurried
    assert after == ["ok"]


def test_a_repository_exported_before_the_admission_parameters_gets_exports_defaults(exported_repository, tmp_path):
    """Without `deadline_us` and `standing_queue_us` in its config (an older export), a CPU model admits as a fresh
    CPU export does (1 s, and a standing queue held to 40 ms), not by the GPU's 10 ms budget, which would refuse
    ordinary CPU bursts."""
    repo = linked_copy(exported_repository, tmp_path / "repo")
    config = repo / "embed" / "config.pbtxt"
    kept = re.sub(
        r'parameters \{\s*key: "(deadline_us|standing_queue_us)"\s*value \{[^}]*\}\s*\}\s*', "", config.read_text()
    )
    assert "deadline_us" not in kept and "standing_queue_us" not in kept
    replace_file(config, kept.encode())
    record_config(repo / "embed")
    with processes.running(repo, tmp_path / "server.log") as server:
        deadline_s = asyncio.run(_gauge(server.metrics_url, "embed", "deadline_seconds"))
        standing_s = asyncio.run(_gauge(server.metrics_url, "embed", "standing_queue_seconds"))
    assert deadline_s == 1.0  # the gauges publish what the model admits by
    assert standing_s == pytest.approx(0.04)


def _texts(texts: list[bytes]) -> list:
    data = np.array([[t] for t in texts], dtype=np.object_)
    i = grpcclient.InferInput("TEXT", list(data.shape), "BYTES")
    i.set_data_from_numpy(data)
    return [i]


def test_embed_is_one_native_model(exported_repository):
    index = json.loads((exported_repository / "repository.json").read_text())
    assert index["models"]["embed"]["backend"] == native.NAME and "embed" not in index["ensemble_requires"]
    manifest = json.loads((exported_repository / "embed" / "manifest.json").read_text())
    assert manifest["tokenizer"] in manifest["files"]  # verified by sha256 at load


@pytest.mark.skipif(NATIVE_ONLY, reason="the Python tokenizer is not served")
def test_native_embed_gives_the_python_tokenizer_paths_embeddings(triton_server):
    """The shipped corpus, each text through embed (tokenized natively) and through tokenizer -> bert."""
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    lines = [line for line in CORPUS.read_text().splitlines() if line.strip()][:80]
    for line in lines:
        native_emb = client.infer("embed", _texts([line.encode()])).as_numpy("EMBEDDING")
        tokens = client.infer("tokenizer", _texts([line.encode()]))
        ids, mask = tokens.as_numpy("input_ids"), tokens.as_numpy("attention_mask")
        inputs = _ids_inputs(ids)
        inputs[1].set_data_from_numpy(mask)
        python_emb = client.infer("bert", inputs).as_numpy("embedding")
        assert float(np.sum(native_emb * python_emb)) >= 0.9999, line


def test_a_bad_element_among_several_texts_is_named_by_its_index(triton_server):
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    for texts, message in [
        ([b"fine", b"also fine", b"\xc3("], "TEXT element 2: TEXT is not valid UTF-8 (byte 0: b'\\xc3')"),
        ([b"fine", b" \t "], "TEXT element 1: TEXT is empty"),
        ([b"x" * 65537, b"fine"], "TEXT element 0: TEXT element is 65537 bytes; the limit is 65536"),
    ]:
        for model in ("embed", "tokenizer"):  # the native model and the Python one name it alike
            with pytest.raises(InferenceServerException) as e:
                client.infer(model, _texts(texts))
            assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and e.value.message() == message, model
    result = client.infer("embed", _texts([b"one", b"two", b"word " * 400]))
    assert result.as_numpy("EMBEDDING").shape == (3, 384)
    assert result.as_numpy("TRUNCATED").ravel().tolist() == [False, False, True]


@pytest.mark.parametrize(
    "model", ["embed", pytest.param("tokenizer", marks=pytest.mark.skipif(NATIVE_ONLY, reason="stub"))]
)
def test_truncate_takes_a_boolean_and_refuses_anything_else(triton_server, model):
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    long_text = b"word " * 600  # past max_seq
    for value in (False, "false", "False", "0", 0):
        with pytest.raises(InferenceServerException) as e:
            client.infer(model, _texts([long_text]), parameters={"truncate": value})
        assert "longer than the max length" in e.value.message(), value
    for value in (True, "true", "1", 1):
        client.infer(model, _texts([long_text]), parameters={"truncate": value})
    for value in ("no", "off", 0.5, 2):
        with pytest.raises(InferenceServerException) as e:
            client.infer(model, _texts([b"short"]), parameters={"truncate": value})
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT", value
        assert "truncate must be true or false, got" in e.value.message(), value


def test_native_embed_counts_truncated_texts(triton_server):
    def truncated() -> float:
        text = urllib.request.urlopen(f"http://{triton_server.metrics_url}/metrics", timeout=5).read().decode()
        found = re.search(r'^bertserve_truncated_total\{model="embed"\} (\S+)$', text, re.M)
        assert found, "no bertserve_truncated_total for embed"
        return float(found[1])

    before = truncated()
    grpcclient.InferenceServerClient(triton_server.grpc_url).infer("embed", _texts([b"word " * 600, b"short"]))
    assert truncated() == before + 1


def test_warm_up_requests_are_not_counted_as_served(exported_repository, tmp_path):
    """Triton warms each native instance up before the server is ready: those requests are the server's own and stay
    out of the success count and the request histogram the SLO reads; the first client request counts as one."""
    repo = linked_copy(exported_repository, tmp_path / "repo")
    config = (repo / "embed" / "config.pbtxt").read_text()
    assert "model_warmup" in config
    with processes.running(repo, tmp_path / "server.log") as server:
        assert served_counts(server.metrics_url, "embed") == (0, 0)
        grpcclient.InferenceServerClient(server.grpc_url).infer("embed", _texts([b"the first client request"]))
        assert served_counts(server.metrics_url, "embed", (1, 1)) == (1, 1)


def _record(model_dir: Path, rel: str) -> None:
    """The manifest's sha256 and size of ``rel`` brought up to date (the file verifies; only its content is wrong)."""
    manifest = json.loads((model_dir / "manifest.json").read_text())
    path = (model_dir / rel).resolve()
    manifest["files"][rel] = {"sha256": sha256(path), "bytes": path.stat().st_size}
    replace_file(model_dir / "manifest.json", json.dumps(manifest, indent=2).encode())


def _load_error(repo: Path, log_path: Path, model: str = "embed") -> str:
    """The reason tritonserver gives for not loading ``model`` (the server must stay up and not ready)."""
    server = processes.start(repo, log_path)
    try:
        deadline = time.monotonic() + 120
        while (found := re.search(rf"failed to load '{model}'.*", server.log())) is None:
            assert server.process.poll() is None and time.monotonic() < deadline, server.log()[-5000:]
            time.sleep(0.25)
        assert processes.http_status(f"http://{server.http_url}/v2/models/{model}/ready") != 200
        return found[0]
    finally:
        processes.stop(server)


def test_a_manifest_path_outside_the_model_directory_is_refused(exported_repository, tmp_path):
    """embed's tokenizer named through `..`: the same file, the right sha256, and still refused by the backend."""
    repo = native_only_copy(exported_repository, tmp_path)
    manifest = json.loads((repo / "embed" / "manifest.json").read_text())
    climbing = "../embed/" + manifest["tokenizer"]
    replace_file(repo / "embed" / "manifest.json", json.dumps({**manifest, "tokenizer": climbing}).encode())
    _record(repo / "embed", climbing)
    error = _load_error(repo, tmp_path / "server.log")
    assert climbing in error and "a file must be a relative path inside the model's directory" in error


def test_tokenizer_ids_past_the_vocabulary_are_refused_at_load(exported_repository, tmp_path):
    repo = native_only_copy(exported_repository, tmp_path)
    manifest = json.loads((repo / "embed" / "manifest.json").read_text())
    tokenizer = json.loads((repo / "embed" / manifest["tokenizer"]).read_text())
    tokenizer["model"]["vocab"]["outofrange"] = manifest["vocab_size"]
    replace_file(repo / "embed" / manifest["tokenizer"], json.dumps(tokenizer).encode())
    _record(repo / "embed", manifest["tokenizer"])
    error = _load_error(repo, tmp_path / "server.log")
    assert f"gives ids from 0 to {manifest['vocab_size']}; the model's vocab_size is {manifest['vocab_size']}" in error


def test_a_deadline_past_a_day_is_refused_at_load(exported_repository, tmp_path):
    """deadline_us * 1000 must never overflow the nanosecond clock: a config beyond a day is refused."""
    repo = native_only_copy(exported_repository, tmp_path)
    rewrite_config(repo / "bert", QueuePolicy(max_queue_size=1, timeout_us=10**17))
    error = _load_error(repo, tmp_path / "server.log", "bert")
    assert "parameter deadline_us must be at most 86400000000 (a day), got 100000000000000000" in error


def test_a_cuda_graphs_setting_other_than_true_or_false_is_refused_at_load(exported_repository, tmp_path):
    repo = native_only_copy(exported_repository, tmp_path)
    config = (repo / "bert" / "config.pbtxt").read_text()
    replace_file(
        repo / "bert" / "config.pbtxt",
        (config + '\nparameters { key: "cuda_graphs" value { string_value: "yes" } }\n').encode(),
    )
    record_config(repo / "bert")
    error = _load_error(repo, tmp_path / "server.log", "bert").replace("\\", "")  # the log escapes quotes
    assert 'parameter cuda_graphs must be "true" or "false", got "yes"' in error


def test_the_tokenizer_model_keeps_its_contract(triton_server):
    """The tokenizer model (native where the native tokenizer reproduces the checkpoint's) answers as the Python model
    did: input_ids and attention_mask int64 [texts, longest], zero-padded on the right, truncated bool [texts, 1],
    each as the checkpoint's own tokenizer (Hugging Face `tokenizers`) gives them."""
    from tokenizers import Tokenizer

    manifest = json.loads((triton_server.repository / "tokenizer" / "manifest.json").read_text())
    oracle = Tokenizer.from_file(str(triton_server.repository / "tokenizer" / "1" / "tokenizer" / "tokenizer.json"))
    oracle.no_padding()
    oracle.enable_truncation(manifest["max_seq"])
    lines = [line.encode() for line in CORPUS.read_text().splitlines() if line.strip()][:40]
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    for texts in [lines[:1], lines[1:4], lines[4:36], [b"short", b"word " * 600, "caf\u00e9 \u4e16\u754c".encode()]]:
        result = client.infer("tokenizer", _texts(texts))
        ids, mask, cut = (result.as_numpy(n) for n in ("input_ids", "attention_mask", "truncated"))
        encodings = oracle.encode_batch([t.decode() for t in texts])
        width = max(len(e.ids) for e in encodings)
        assert ids.dtype == mask.dtype == np.int64 and cut.dtype == np.bool_
        assert ids.shape == mask.shape == (len(texts), width) and cut.shape == (len(texts), 1)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            assert ids[row, :n].tolist() == e.ids and not ids[row, n:].any(), texts[row][:40]
            assert mask[row].tolist() == [1] * n + [0] * (width - n)
            assert bool(cut[row, 0]) == bool(e.overflowing)


def test_the_default_export_runs_no_python_model(exported_repository):
    """Where the native tokenizer reproduces the checkpoint's, every model of the default export is native (or kept
    only for stock Triton): tritonserver starts no Python stub."""
    index = json.loads((exported_repository / "repository.json").read_text())
    assert {m: s["backend"] for m, s in index["models"].items() if s["backend"] == "python"} == {}
    assert not (exported_repository / "tokenizer" / "1" / "model.py").exists()
