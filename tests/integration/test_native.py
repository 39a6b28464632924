"""What only the native encoder backend does: the TorchScript runtime, and load shedding in the backend."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from export.model_configs import QueuePolicy
from reliability import processes
from reliability.repository import linked_copy, replace_file, rewrite_config
from serving import native

pytestmark = pytest.mark.integration


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
    """bert_fp32 from its TorchScript file (the manifest names the runtime) against its AOTInductor package."""
    repo = linked_copy(exported_repository, tmp_path / "repo")
    manifest = json.loads((repo / "bert_fp32" / "manifest.json").read_text())
    assert "torchscript" in manifest["artifacts"]
    replace_file(repo / "bert_fp32" / "manifest.json", json.dumps({**manifest, "runtime": "torchscript"}).encode())
    ids = np.random.default_rng(0).integers(1000, 2000, (3, 21))
    aoti = grpcclient.InferenceServerClient(triton_server.grpc_url).infer("bert_fp32", _ids_inputs(ids))
    with processes.running(repo, tmp_path / "server.log") as server:
        script = grpcclient.InferenceServerClient(server.grpc_url).infer("bert_fp32", _ids_inputs(ids))
        assert "bert_fp32: fp32 torchscript artifact" in server.log()
    a, b = aoti.as_numpy("embedding"), script.as_numpy("embedding")
    assert (np.sum(a * b, axis=1) >= 0.9999).all()


async def _burst(url: str, n: int, tokens: int, timeout_us: int | None = None, behind: int = 0) -> list[str]:
    """n concurrent requests to bert, sent ``behind`` > 0 ms after a request of 32 x 128 tokens that keeps the
    model busy; "ok" or each refusal's status and message (the busy request's outcome is not returned)."""
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
        out = await asyncio.gather(*[one(1, tokens, timeout_us) for _ in range(n)])
        if busy is not None:
            await busy
        return out
    finally:
        await client.close()


@pytest.mark.slow
def test_a_full_queue_refuses_at_once_and_a_late_request_at_its_turn(exported_repository, tmp_path):
    repo = linked_copy(exported_repository, tmp_path / "repo")
    rewrite_config(repo / "bert", QueuePolicy(max_queue_size=32, timeout_us=10_000_000))
    with processes.running(repo, tmp_path / "server.log") as server:
        full = asyncio.run(_burst(server.grpc_url, 80, 16, behind=5))
        # The client's own deadline (1 ms) is shorter than the model's: what queues behind a forward outwaits it.
        late = asyncio.run(_burst(server.grpc_url, 2, 16, timeout_us=1000, behind=5))
        after = asyncio.run(_burst(server.grpc_url, 1, 16))
    refused = [r for r in full if r != "ok"]
    assert "ok" in full and refused, full
    assert all(r.startswith("StatusCode.UNAVAILABLE: bert is overloaded: 32 sequences") for r in refused), refused
    expired = [r for r in late if r != "ok"]
    assert expired and all("past its deadline of 1.0 ms" in r and "UNAVAILABLE" in r for r in expired), late
    assert after == ["ok"]
