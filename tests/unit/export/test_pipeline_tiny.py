"""The whole export on a tiny BERT: every artifact path, the gates, the generated repository."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from export import checkpoint, retrieval_set
from export.config import ExportConfig
from export.encoder import Encoder
from export.errors import AccuracyGateError
from export.model_configs import parse
from export.pipeline import _eager_runner, run
from export.verify import Verifier
from serving.contract import native
from serving.contract.artifacts import AOTI, ONNX, PATHS, TORCHSCRIPT
from serving.contract.hardware import cpu_model
from serving.contract.manifest import VerificationError, read, verify
from serving.python_backend.runtime import Runtime


@pytest.fixture(scope="module")
def repo(tiny_repository: Path) -> Path:
    return tiny_repository


def test_every_artifact_path_is_built_verified_and_gated(repo):
    manifest = read(repo / "bert")
    assert manifest["precision"] == "fp32" and manifest["runtime"] == AOTI
    assert set(manifest["artifacts"]) == set(PATHS)
    for path, entry in manifest["artifacts"].items():
        assert (repo / "bert" / entry["file"]).is_file()
        acc = manifest["accuracy"][path]
        assert acc["min_cosine"] >= 0.999 and acc["spearman"] >= 0.98, (path, acc)
    verify(repo / "bert", manifest)
    report = manifest["compile_report"]
    assert report["dynamo"] == {"graphs": 1, "graph_breaks": 0}
    aoti = next(a for a in report["artifacts"] if a["path"] == AOTI)
    assert aoti["generated_kernels"] > 0
    retrieval = manifest["accuracy"]["retrieval"]  # the served artifact searched the retrieval set as eager did
    assert retrieval["artifact"] == AOTI and retrieval["texts"] == len(retrieval_set.load()) and retrieval["passed"]
    assert retrieval["nn_agreement"] >= 0.98 and retrieval["recall_at_10"] >= 0.98, retrieval
    assert report["retrieval"] == {"bert": retrieval}


def test_generated_configs_round_trip_through_the_schema(repo):
    configs = {p.parent.name: parse(p.read_text()) for p in repo.glob("*/config.pbtxt")}
    assert set(configs) == {"tokenizer", "bert", "embed", "bert_torchscript"}
    bert = configs["bert"]
    assert bert.max_batch_size == 4 and bert.backend == native.NAME
    assert "EXECUTION_ENV_PATH" not in bert.parameters and bert.parameters["threads"].string_value == "0"
    assert not (repo / "bert" / "1" / "model.py").exists()  # the native backend runs no Python
    assert all(i.allow_ragged_batch for i in bert.input)
    assert bert.dynamic_batching.max_queue_delay_microseconds == 0  # the backend batches what queues
    for warm in bert.model_warmup:
        for name, inp in warm.inputs.items():
            assert name in {"input_ids", "attention_mask"}
            assert (repo / "bert" / "warmup" / inp.input_data_file).stat().st_size == 8 * inp.dims[0]
    tok = configs["tokenizer"]  # native too: no Python stub process for the ids-only clients
    assert tok.backend == native.NAME and "EXECUTION_ENV_PATH" not in tok.parameters
    assert not (repo / "tokenizer" / "1" / "model.py").exists()
    assert [o.name for o in tok.output] == ["input_ids", "attention_mask", "truncated"]
    tok_manifest = json.loads((repo / "tokenizer" / "manifest.json").read_text())
    assert tok_manifest["runtime"] == "none" and tok_manifest["tokenizer"] in tok_manifest["files"]
    assert tok.parameters["max_seq"].string_value == "32"
    assert tok.model_warmup[0].inputs["TEXT"].input_data_file == "text"
    embed = configs["embed"]  # one native model: the tiny checkpoint has MiniLM's (reproducible) tokenizer
    assert embed.backend == native.NAME and embed.HasField("dynamic_batching")
    assert [i.name for i in embed.input] == ["TEXT"]
    assert [o.name for o in embed.output] == ["EMBEDDING", "TRUNCATED", "TOKENS"]
    manifest = json.loads((repo / "embed" / "manifest.json").read_text())
    assert manifest["tokenizer"] == "1/tokenizer/tokenizer.json" and manifest["tokenizer"] in manifest["files"]
    assert configs["bert_torchscript"].platform == "pytorch_libtorch"
    index = json.loads((repo / "repository.json").read_text())
    assert index["served"] == {"bert": "fp32"} and index["models"]["bert_torchscript"]["backend"] == "pytorch"


def test_runtime_serves_the_verified_artifact_like_eager(repo, tiny_checkpoint):
    ckpt = checkpoint.load(str(tiny_checkpoint))
    encoder = Encoder(ckpt.model).eval()
    runtime = Runtime(repo / "bert", read(repo / "bert"), "cpu")
    ids = torch.randint(1000, 2000, (3, 20))
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0
    with torch.inference_mode():
        ref = encoder(ids, mask).numpy()
    np.testing.assert_allclose(runtime(ids.numpy(), mask.numpy()), ref, atol=1e-4)


def test_runtime_refuses_a_tampered_artifact(repo, tmp_path):
    manifest = read(repo / "bert")
    bad = copy.deepcopy(manifest)
    bad["files"][manifest["artifacts"][AOTI]["file"]]["sha256"] = "0" * 64
    with pytest.raises(VerificationError, match="model.aoti.pt2"):
        Runtime(repo / "bert", bad, "cpu")


def test_gate_fails_on_corrupted_weights(tiny_checkpoint):
    ckpt = checkpoint.load(str(tiny_checkpoint))
    encoder = Encoder(ckpt.model).eval()
    verifier = Verifier(_eager_runner(encoder, "cpu"), ckpt.tokenizer, 32)
    assert verifier.gate("fp32 eager", "fp32", _eager_runner(encoder, "cpu")).min_cosine > 0.9999
    corrupted = copy.deepcopy(encoder)
    with torch.no_grad():
        for p in corrupted.bert.encoder.layer[0].parameters():
            p.add_(torch.randn_like(p) * 0.5)
    with pytest.raises(AccuracyGateError, match="corrupted.*minimum cosine"):
        verifier.gate("corrupted", "fp32", _eager_runner(corrupted, "cpu"))


def test_autotune_records_what_it_chose_for_this_machine(tiny_checkpoint, tmp_path):
    out = tmp_path / "repo"
    run(ExportConfig(model=str(tiny_checkpoint), precisions=("fp32",), max_batch=4, max_seq=32, output=out,
                     skip=frozenset({TORCHSCRIPT, ONNX}), autotune=True))  # fmt: skip
    tuning = read(out / "bert")["autotune"]
    assert tuning["ran"] and tuning["tuned_for"] == cpu_model() and tuning["seconds"] > 0
    assert read(out / "bert")["compiled_threads"] == torch.get_num_threads()
    assert tuning["backends"] == "CPP,ATEN" and tuning["tuned_at"] == "2x16"
    # BERT's GEMMs: QKV / output / FFN projections, each class timed against the library kernel
    assert tuning["gemm_classes"], tuning
    for shapes, c in tuning["gemm_classes"].items():
        assert c["candidates"] >= 2 and c["winner_ms"] > 0 and c["gemms"] >= 1, (shapes, c)
    assert read(out / "bert")["compile_report"]["autotune"]["bert"] == tuning
