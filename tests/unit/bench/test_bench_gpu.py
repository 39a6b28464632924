"""The serving runtime's CUDA-graph replay over an AOTInductor package matches eager (needs a GPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel

from bench.variants import _manifest_for
from export import artifacts as art
from export.encoder import Encoder
from tests.unit.conftest import TINY


@pytest.mark.gpu
@pytest.mark.slow
def test_runtime_replays_cuda_graphs_over_aoti(tmp_path: Path) -> None:
    from serving.python_backend.runtime import Runtime

    torch.manual_seed(0)
    # fp16, as a CUDA repository is served (fp32 on CUDA does not export with a dynamic length: torch 2.11's
    # memory-efficient attention guards the length's alignment to 8)
    encoder = Encoder(BertModel(BertConfig(**TINY), add_pooling_layer=False)).cuda().half().eval()
    package = tmp_path / "model.aoti.pt2"
    art.compile_aoti(art.export_program(encoder, "cuda", 8, 32), package)
    runtime = Runtime(tmp_path, _manifest_for(package), "cuda")
    ids = torch.randint(1000, 2000, (4, 32))
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        expected = encoder(ids.cuda(), mask.cuda()).float().cpu().numpy()
    for _ in range(3):  # capture on the first call, replay after
        got = runtime(ids.numpy(), mask.numpy())
        np.testing.assert_allclose(got, expected, atol=2e-3)
    assert len(runtime.graphs) == 1
    costs = runtime.warm([(1, 16), (4, 32), (8, 32)])  # what the bert model does before it reports ready
    assert sorted(runtime.graphs) == [(1, 16), (4, 32), (8, 32)]
    assert sorted(costs) == [(1, 16), (4, 32), (8, 32)] and all(0 < c < 1 for c in costs.values())
    np.testing.assert_allclose(runtime(ids.numpy(), mask.numpy()), expected, atol=2e-3)
    other_ids = torch.randint(2000, 3000, (4, 32))
    with torch.inference_mode():
        other_expected = encoder(other_ids.cuda(), mask.cuda()).float().cpu().numpy()
    other = runtime(other_ids.numpy(), mask.numpy())  # the same bucket: its pinned input buffer rewritten
    np.testing.assert_allclose(other, other_expected, atol=2e-3)
    np.testing.assert_allclose(got, expected, atol=2e-3)  # an answer handed out is not the next replay's buffer
    assert not np.allclose(other, got, atol=2e-3)
