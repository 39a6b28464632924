"""The int8 gates of the rerank and classify tasks: their shipped sets, their arithmetic, and what they decide."""

from __future__ import annotations

import pytest
import torch

from export import rerank, retrieval_set, sequence_gates, sequence_sets
from export.errors import AccuracyGateError
from export.sequence_gates import LABEL_MIN, RERANK_MIN, label_agreement, rerank_agreement
from export.serving_choice import choose


def test_the_shipped_sets_are_rows_of_the_retrieval_set():
    source = {t.text: t for t in retrieval_set.load()}
    lists = sequence_sets.rerank_lists()
    assert len(lists) == sequence_sets.LISTS
    for query, docs in lists:
        assert len(docs) == sequence_sets.DOCUMENTS and query not in docs and len(set(docs)) == len(docs)
        assert query in source and all(d in source for d in docs)
    queries = [q for q, _ in lists]
    assert len({source[q].script for q in queries}) >= 20  # every script asks once
    texts = sequence_sets.classify_texts()
    assert len(texts) >= 300 and all(t in source for t in texts) and len(set(texts)) == len(texts)
    assert not set(texts) & set(queries)
    assert len({source[t].script for t in texts}) >= 20


def _lists(n: int = 50, docs: int = 20, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(docs, generator=g, dtype=torch.float64) for _ in range(n)]


def _swap_top_two(scores: torch.Tensor) -> torch.Tensor:
    out = scores.clone()
    first, second = scores.topk(2).indices.tolist()
    out[first], out[second] = scores[second], scores[first]
    return out


def test_identical_scores_agree_fully():
    ref = _lists()
    r = rerank_agreement([s.clone() for s in ref], ref)
    assert (r.lists, r.spearman_mean, r.spearman_min, r.top1, r.top1_margin, r.max_abs_diff) == (50, 1, 1, 1, 0, 0)
    assert r.passed and r.as_dict()["gate"] == RERANK_MIN


def test_a_swap_of_the_top_two_costs_top1_and_a_little_spearman():
    ref = _lists()
    out = [_swap_top_two(s) if i < 2 else s.clone() for i, s in enumerate(ref)]
    r = rerank_agreement(out, ref)
    assert r.top1 == pytest.approx(48 / 50) and r.passed  # 2 of 50 swapped: at the gate
    assert r.spearman_min == pytest.approx(1 - 6 * 2 / (20 * (20**2 - 1)))  # two ranks moved by one
    margins = [float(s.topk(2).values[0] - s.topk(2).values[1]) for s in ref[:2]]
    assert r.top1_margin == pytest.approx(max(margins))
    out[2] = _swap_top_two(ref[2])
    r = rerank_agreement(out, ref)
    assert r.top1 == pytest.approx(47 / 50) and not r.passed
    assert [e.metric for e in r.failures("x")] == ["rerank top1"]


def test_a_list_in_reverse_order_fails_the_spearman_mean():
    ref = _lists()
    out = [s.clone() for s in ref]
    out[5] = -ref[5]  # reverse order: Spearman -1, and its best is fp32's worst
    r = rerank_agreement(out, ref)
    assert r.spearman_min == pytest.approx(-1.0)
    assert r.spearman_mean == pytest.approx((49 - 1) / 50)
    assert r.top1 == pytest.approx(49 / 50)
    assert [e.metric for e in r.failures("x")] == ["rerank spearman_mean"]
    with pytest.raises(AccuracyGateError, match="rerank spearman_mean 0.96"):
        raise r.failures("rerank int8 aoti")[0]


def test_an_exact_tie_at_the_top_is_no_disagreement():
    ref = [torch.tensor([0.5, 2.0, 2.0, -1.0]), torch.tensor([1.0, 0.0, -1.0])]
    out = [torch.tensor([0.5, 2.0, 2.1, -1.0]), torch.tensor([1.0, 0.0, -1.0])]  # the other of fp32's tied two
    assert rerank_agreement(out, ref).top1 == 1.0
    out[0][0] = 3.0  # a document fp32 scores lower comes first
    assert rerank_agreement(out, ref).top1 == 0.5


def test_rerank_agreement_refuses_mismatched_lists():
    ref = _lists(3)
    with pytest.raises(ValueError, match="same lists"):
        rerank_agreement(ref[:2], ref)
    with pytest.raises(ValueError, match="same lists"):
        rerank_agreement([s[:5] for s in ref], ref)


def test_label_agreement_counts_changed_labels_and_near_ties():
    g = torch.Generator().manual_seed(1)
    ref = torch.randn(100, 3, generator=g, dtype=torch.float64)
    out = ref + 1e-3
    r = label_agreement(out, ref)
    assert (r.texts, r.label_agreement, r.max_abs_diff) == (100, 1.0, pytest.approx(1e-3))
    assert r.passed and r.as_dict()["gate"] == LABEL_MIN
    top2 = ref.topk(2, dim=1).values
    assert r.min_margin == pytest.approx(float((top2[:, 0] - top2[:, 1]).min()))
    assert r.near_ties == int(((top2[:, 0] - top2[:, 1]) <= 2e-3).sum())
    flipped = ref.clone()
    flipped[0] = ref[0].flip(0) if ref[0].argmax() != 1 else ref[0].roll(1)  # a different argmax
    assert flipped[0].argmax() != ref[0].argmax()
    assert label_agreement(flipped, ref).label_agreement == pytest.approx(0.99)
    assert label_agreement(flipped, ref).passed  # 1 in 100: at the gate
    flipped[1] = ref[1].flip(0) if ref[1].argmax() != 1 else ref[1].roll(1)
    r = label_agreement(flipped, ref)
    assert r.label_agreement == pytest.approx(0.98) and not r.passed
    assert [e.metric for e in r.failures("x")] == ["classify label_agreement"]


def test_label_agreement_refuses_mismatched_logits():
    with pytest.raises(ValueError, match="labels >= 2"):
        label_agreement(torch.zeros(4, 1), torch.zeros(4, 1))
    with pytest.raises(ValueError, match="one shape"):
        label_agreement(torch.zeros(4, 3), torch.zeros(5, 3))


def test_a_refused_int8_serves_fp32_with_the_reason():
    failure = rerank_agreement([-s for s in _lists()], _lists()).failures("rerank int8 aoti (model_int8.pt2)")[0]
    choice = choose({"fp32": 10.0, "int8": 2.0}, refused={"int8": failure}, gate="rerank gate", model="rerank")
    assert choice.precision == "fp32"
    assert "fp32 is the only precision that passed the rerank gate" in choice.reason
    assert "int8 may not serve rerank: rerank int8 aoti (model_int8.pt2): rerank spearman_mean" in choice.reason
    with pytest.raises(AccuracyGateError):
        choose({"fp32": 10.0, "int8": 2.0}, forced="int8", refused={"int8": failure})
    assert sequence_gates.TIE == rerank.MAX_ABS_DIFF  # a tie: closer than fp32's own package is held to


def test_tied_scores_share_their_average_rank():
    assert sequence_gates.average_ranks(torch.tensor([3.0, 1.0, 2.0, 2.0])).tolist() == [3.0, 0.0, 1.5, 1.5]
    # documents that tokenize alike score alike in both precisions: the tie is kept, not an order to lose
    ref = torch.tensor([0.5, 0.5, 0.5, 0.2, 0.9])
    assert sequence_gates.spearman(ref + 0.01, ref) == pytest.approx(1.0)
    # a tied group that int8 moves below another group costs what the groups' sizes weigh
    out = torch.tensor([0.1, 0.1, 0.1, 0.2, 0.9])
    assert sequence_gates.spearman(out, ref) == pytest.approx(0.25)  # ranks [1,1,1,3,4] vs [2,2,2,0,4]
    assert sequence_gates.spearman(torch.ones(3), torch.ones(3)) == 1.0
    assert sequence_gates.spearman(torch.tensor([1.0, 2.0, 3.0]), torch.ones(3)) == 1.0  # fp32 orders nothing
    assert sequence_gates.spearman(torch.ones(3), torch.tensor([1.0, 2.0, 3.0])) == 0.0  # the order is lost


def test_scores_closer_than_fp32_is_held_to_are_a_tie():
    ref = torch.tensor([0.30000, 0.30004, 0.30008, 0.9, -0.2])  # the first three chain within 1e-4
    swapped = torch.tensor([0.30008, 0.30004, 0.30000, 0.9, -0.2])
    assert sequence_gates.tie_groups(ref, 1e-4).tolist() == [1, 1, 1, 2, 0]
    assert sequence_gates.spearman(swapped, ref, 1e-4) == pytest.approx(1.0)
    assert sequence_gates.spearman(swapped, ref) < 0.9  # exact ties only: an order lost
    near_top = [torch.tensor([0.1, 0.9, 0.89995]), torch.tensor([0.2, 0.1, 0.3])]
    out = [torch.tensor([0.1, 0.9, 0.9001]), torch.tensor([0.2, 0.1, 0.3])]  # the near-tied second comes first
    r = rerank_agreement(out, near_top)
    assert (r.top1, r.spearman_mean) == (1.0, pytest.approx(1.0))
    far = [torch.tensor([0.1, 0.9, 0.899]), torch.tensor([0.2, 0.1, 0.3])]  # 1e-3 apart: an order to keep
    r = rerank_agreement([torch.tensor([0.1, 0.9, 0.9001]), far[1]], far)
    assert r.top1 == 0.5 and r.spearman_mean < 1.0
