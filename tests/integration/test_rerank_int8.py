"""An int8 reranker served natively by the real tritonserver: export builds fp32 and int8 packages of a seeded
cross-encoder, the manifest names the int8 one, and the server's scores of the shipped lists keep fp32's order as
export's gate demands (mean Spearman, top-1) within the score error export measured on its own package.

The checkpoint is a small seeded BERT (2 layers, hidden 64) with MiniLM's tokenizer, whose int8 passes the gate. The
seeded MiniLM cross-encoder's does not (docs/INT8.md): its export serves fp32, which export's unit tests cover."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient

from export import sequence_gates, sequence_int8, sequence_sets
from tests.integration import repositories
from tests.integration.conftest import exported
from tests.integration.repositories import MAX_SEQ
from tests.integration.test_rerank import rerank, serving

pytestmark = pytest.mark.integration

MAX_BATCH = repositories.RERANK_INT8.max_batch


@pytest.fixture(scope="module")
def checkpoint() -> Path:
    return repositories.seeded_reranker()


@pytest.fixture(scope="module")
def repository(checkpoint):
    return exported(repositories.RERANK_INT8)


@pytest.fixture(scope="module")
def manifest(repository) -> dict:
    return json.loads((repository / "rerank" / "manifest.json").read_text())


@pytest.fixture(scope="module")
def server(repository, tmp_path_factory):
    yield from serving(repository, tmp_path_factory.mktemp("rerank-int8"))


@pytest.fixture(scope="module")
def client(server):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def fp32_scores(checkpoint) -> list[torch.Tensor]:
    """The shipped lists scored by the same checkpoint in eager transformers, fp32."""
    from transformers import AutoTokenizer

    from export import cross_encoder

    model = cross_encoder.CrossEncoder(cross_encoder.load(checkpoint)).eval()
    return sequence_int8.rerank_outputs(model, AutoTokenizer.from_pretrained(str(checkpoint)), MAX_SEQ, MAX_BATCH)


def test_the_int8_package_is_the_one_served(repository, manifest):
    assert manifest["precision"] == "int8" and manifest["recipe"]
    assert manifest["artifacts"]["aoti"]["file"] == f"1/{sequence_int8.INT8_FILE}"
    assert (repository / "rerank" / "1" / sequence_int8.INT8_FILE).is_file()
    assert manifest["accuracy"]["int8"]["aoti"]["passed"]


def served_lists(client) -> list[torch.Tensor]:
    served = []
    for query, documents in sequence_sets.rerank_lists():
        scores = rerank(client, query.encode(), [d.encode() for d in documents])
        assert scores.shape == (len(documents),)
        served.append(torch.from_numpy(scores.copy()))
    return served


def test_served_int8_keeps_fp32s_order_on_the_shipped_lists(client, manifest, fp32_scores):
    served = served_lists(client)
    figures = sequence_gates.rerank_agreement(served, fp32_scores)
    assert figures.passed, figures
    exported_figures = manifest["accuracy"]["int8"]["aoti"]
    # it errs no more than export measured on the same package, give or take the server's padding of a list
    assert figures.max_abs_diff <= 1.5 * exported_figures["max_abs_diff"], (figures, exported_figures)
    assert abs(figures.spearman_mean - exported_figures["spearman_mean"]) <= 0.005, (figures, exported_figures)


def test_the_answers_are_the_int8_packages(repository, client, checkpoint, fp32_scores):
    """The server's scores are the int8 package's, run here on the same lists, and not fp32's."""
    from transformers import AutoTokenizer

    from serving.contract.artifacts import AOTI, load_module

    package = load_module(AOTI, repository / "rerank" / "1" / sequence_int8.INT8_FILE, "cpu")
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    int8 = sequence_int8.rerank_outputs(package, tokenizer, MAX_SEQ, MAX_BATCH)
    served = served_lists(client)
    to_int8 = max(float((s - i).abs().max()) for s, i in zip(served, int8, strict=True))
    to_fp32 = max(float((s - f).abs().max()) for s, f in zip(served, fp32_scores, strict=True))
    assert to_fp32 > 0 and to_int8 <= to_fp32 / 10, (to_int8, to_fp32)


def test_the_same_list_scores_the_same_twice(client):
    query, documents = sequence_sets.rerank_lists()[0]
    together = rerank(client, query.encode(), [d.encode() for d in documents])
    again = rerank(client, query.encode(), [d.encode() for d in documents])
    assert np.array_equal(together, again)  # the int8 package is deterministic on one input
