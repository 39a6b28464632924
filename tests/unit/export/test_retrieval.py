"""The retrieval gate: its shipped set, its two measures, and what it decides about serving."""

from __future__ import annotations

import collections

import pytest
import torch

from export import retrieval_set
from export.errors import AccuracyGateError
from export.serving_choice import choose
from export.verify import RETRIEVAL_MIN, retrieval


def test_the_shipped_set_is_large_multilingual_and_says_where_each_text_came_from():
    texts = retrieval_set.load()
    scripts = collections.Counter(t.script for t in texts)
    assert len(texts) >= 1000 and len(scripts) >= 10, scripts
    assert len({t.text for t in texts}) == len(texts)
    for t in texts:
        assert t.script == retrieval_set.script_of(t.text), t
        assert t.catalog in retrieval_set.CATALOGS and t.licence == retrieval_set.CATALOGS[t.catalog], t
        assert t.locale and t.package, t


def test_the_set_is_kept_apart_from_the_tokenizer_tests_texts():
    from tests.unit.backend import multilingual

    tokenizer_texts = multilingual.texts()
    if not tokenizer_texts:
        pytest.skip("no gettext catalogs on this machine")
    shared = {t.text for t in retrieval_set.load()} & set(tokenizer_texts)
    assert not shared, sorted(shared)[:5]


def _unit(rows: list[list[float]]) -> torch.Tensor:
    return torch.nn.functional.normalize(torch.tensor(rows, dtype=torch.float64), dim=1)


def test_identical_embeddings_agree_fully():
    emb = torch.randn(50, 16, generator=torch.Generator().manual_seed(0))
    r = retrieval(emb, emb)
    assert (r.nn_agreement, r.recall_at_10, r.texts) == (1.0, 1.0, 50)
    assert r.min_cosine == pytest.approx(1.0) and r.passed


def test_a_text_whose_nearest_neighbour_changes_counts_against_agreement():
    # a sits between b and c, slightly nearer b; moving a a little towards c changes a's neighbour only
    ref = _unit([[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.9, -0.12, 0.0], [0.0, 0.0, 1.0]])
    out = ref.clone()
    out[0] = torch.nn.functional.normalize(torch.tensor([1.0, -0.05, 0.0], dtype=torch.float64), dim=0)
    r = retrieval(out, ref, k=2)
    assert r.nn_agreement == pytest.approx(3 / 4)
    assert r.recall_at_10 == pytest.approx(1.0)  # the same two neighbours, in another order
    assert r.min_cosine < 1.0 and not r.passed
    assert [e.metric for e in r.failures("x")] == ["retrieval nn_agreement"]


def _sims(emb: torch.Tensor) -> torch.Tensor:
    emb = torch.nn.functional.normalize(emb, dim=1)
    return (emb @ emb.T).fill_diagonal_(-9.0)


def test_recall_counts_the_reference_neighbours_found():
    gen = torch.Generator().manual_seed(1)
    ref = torch.randn(30, 8, generator=gen, dtype=torch.float64)
    out = ref + 0.5 * torch.randn(30, 8, generator=gen, dtype=torch.float64)
    r = retrieval(out, ref, k=5)
    top_ref, top_out = _sims(ref).topk(5).indices, _sims(out).topk(5).indices
    expected = sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(top_ref, top_out, strict=True)) / 150
    assert r.recall_at_10 == pytest.approx(expected) and r.recall_at_10 < 1.0


def test_a_neighbour_the_reference_ranks_as_near_is_not_a_miss():
    ref = _unit([[1.0, 0.0], [0.8, 0.6], [0.8, -0.6]])  # 1 and 2 are exactly as near to 0
    out = _unit([[1.0, -1e-4], [0.8, 0.6], [0.8, -0.6]])
    r = retrieval(out, ref, k=1)
    assert r.nn_agreement == 1.0 and r.recall_at_10 == 1.0


def test_a_precision_that_fails_the_retrieval_gate_does_not_serve_bert():
    failed = AccuracyGateError("bert_int8 aoti", "retrieval nn_agreement", 0.945, RETRIEVAL_MIN["nn_agreement"])
    choice = choose({"fp32": 2.0, "int8": 1.0}, refused={"int8": failed})
    assert choice.precision == "fp32"
    assert "int8 may not serve bert" in choice.reason and "nn_agreement 0.94500" in choice.reason
    assert "fp32 is the only precision that passed the retrieval gate" in choice.reason
    with pytest.raises(AccuracyGateError, match="retrieval nn_agreement"):
        choose({"fp32": 2.0, "int8": 1.0}, forced="int8", refused={"int8": failed})
    with pytest.raises(AccuracyGateError):
        choose({"int8": 1.0}, refused={"int8": failed})
    assert choose({"fp32": 2.0, "int8": 2.0}).precision == "int8"  # passing, it serves as before
