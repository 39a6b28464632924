"""An int8 reranker served natively by the real tritonserver: export builds fp32 and int8 packages of the seeded
cross-encoder, the manifest names the int8 one, and the server's scores of the shipped lists keep fp32's order as
export's gate demands (mean Spearman, top-1) within the score error export measured on its own package."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient

from export import sequence_gates, sequence_int8, sequence_sets
from tests.integration.conftest import ROOT
from tests.integration.test_rerank import MAX_ABS_DIFF, MAX_SEQ, exported, rerank, serving

pytestmark = pytest.mark.integration

REPOSITORY = ROOT / "build" / "test-rerank-int8-repository"
MAX_BATCH = 32


@pytest.fixture(scope="module")
def repository():
    return exported(REPOSITORY, "rerank", MAX_BATCH, "--precision", "fp32,int8", "--serve", "int8")


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
def fp32_scores(tmp_path_factory) -> list[torch.Tensor]:
    """The shipped lists scored by the same seeded checkpoint in eager transformers, fp32."""
    from transformers import AutoTokenizer

    from export import cross_encoder

    path = cross_encoder.build_seeded(tmp_path_factory.mktemp("ce") / "ce")
    model = cross_encoder.CrossEncoder(cross_encoder.load(path)).eval()
    return sequence_int8.rerank_outputs(model, AutoTokenizer.from_pretrained(str(path)), MAX_SEQ, MAX_BATCH)


def test_the_int8_package_is_the_one_served(repository, manifest):
    assert manifest["precision"] == "int8" and manifest["recipe"]
    assert manifest["artifacts"]["aoti"]["file"] == f"1/{sequence_int8.INT8_FILE}"
    assert (repository / "rerank" / "1" / sequence_int8.INT8_FILE).is_file()
    assert manifest["accuracy"]["int8"]["aoti"]["passed"]


def test_served_int8_keeps_fp32s_order_on_the_shipped_lists(client, manifest, fp32_scores):
    served = []
    for query, documents in sequence_sets.rerank_lists():
        scores = rerank(client, query.encode(), [d.encode() for d in documents])
        assert scores.shape == (len(documents),)
        served.append(torch.from_numpy(scores.copy()))
    figures = sequence_gates.rerank_agreement(served, fp32_scores)
    assert figures.passed, figures
    exported_figures = manifest["accuracy"]["int8"]["aoti"]
    # int8 is what answers (fp32 would be within fp32's gate), and it errs no more than export measured on the same
    # package, give or take the server's own padding of a list
    assert figures.max_abs_diff > MAX_ABS_DIFF, figures
    assert figures.max_abs_diff <= 1.5 * exported_figures["max_abs_diff"], (figures, exported_figures)
    assert abs(figures.spearman_mean - exported_figures["spearman_mean"]) <= 0.005, (figures, exported_figures)


def test_a_list_scores_the_same_alone_or_beside_others(client):
    query, documents = sequence_sets.rerank_lists()[0]
    together = rerank(client, query.encode(), [d.encode() for d in documents])
    again = rerank(client, query.encode(), [d.encode() for d in documents])
    assert np.array_equal(together, again)  # the int8 package is deterministic on one input
