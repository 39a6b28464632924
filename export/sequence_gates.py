"""The int8 gates of the rerank and classify tasks, on what their users see, against fp32 on the shipped sets
(export/sequence_sets.py).

Rerank: per list, the Spearman correlation of the int8 scores with fp32's (the order a client sorts by), its mean
over the lists gated at ``RERANK_MIN["spearman_mean"]`` = 0.99 (the minimum is reported); and top-1 agreement, the
share of lists whose best document is fp32's, gated at ``RERANK_MIN["top1"]`` = 0.96. Why 0.96 and not 1: a list's
best document changes only where int8's error exceeds fp32's own margin between its two best, and how close the
closest such margin is in a set of real lists says more about the set than about the quantization; an int8 model
that swaps the top two of 20 documents keeps a Spearman of 0.9985. 0.96 lets 2 of the 50 shipped lists swap (the
report gives fp32's largest margin among the swapped as ``top1_margin``: a near tie or not) and refuses a third; 1
would refuse a model for one near tie, and 0.95, the floor the issue allows, admits the same 2 of 50.

Classify: label agreement, the share of texts whose argmax label is fp32's, gated at ``LABEL_MIN`` = 0.99.

Ties: fp32 scores within ``TIE`` = 1e-4 of each other have no order to keep. That is the tolerance fp32's own
package is held to against ``transformers`` (export/rerank.py's ``MAX_ABS_DIFF``), so an order finer than it is not
fp32's either. A document (or label) that fp32 scores within ``TIE`` of its own best counts as fp32's choice, and
Spearman ranks fp32's scores that chain within ``TIE`` as one tie at their average rank, the precision under test's
scores of those documents too (its order inside the tie is no disagreement). Exact ties are common: a first-stage
embedder hands a reranker documents that tokenize alike (texts of a script the vocabulary reads as a run of [UNK]).
Near ties are too, on seeded weights: a random encoder's [CLS] state hardly depends on the input, and it scores a
list's documents within 1e-4 of each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from export.errors import AccuracyGateError

RERANK_MIN = {"spearman_mean": 0.99, "top1": 0.96}
LABEL_MIN = {"label_agreement": 0.99}
TIE = 1e-4  # rerank.MAX_ABS_DIFF, fp32's own tolerance (not imported: rerank imports this module)


def _failures(figures, floors: dict[str, float], artifact: str, task: str) -> list[AccuracyGateError]:
    return [
        AccuracyGateError(artifact, f"{task} {metric}", getattr(figures, metric), floor)
        for metric, floor in floors.items()
        if getattr(figures, metric) < floor
    ]


def _as_dict(figures, floors: dict[str, float]) -> dict:
    return {
        **{k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(figures).items()},
        "gate": floors,
        "passed": figures.passed,
    }


@dataclass(frozen=True)
class RerankAgreement:
    """Lists scored by a precision against fp32's scores of the same lists."""

    lists: int
    spearman_mean: float
    spearman_min: float
    top1: float  # share of lists whose best document is fp32's (or one fp32 scores as high)
    top1_margin: float  # of the lists that swap: fp32's largest margin between its best and int8's best (0: none)
    max_abs_diff: float  # of any score

    def failures(self, artifact: str) -> list[AccuracyGateError]:
        return _failures(self, RERANK_MIN, artifact, "rerank")

    @property
    def passed(self) -> bool:
        return not self.failures("")

    def as_dict(self) -> dict:
        return _as_dict(self, RERANK_MIN)


def average_ranks(x: torch.Tensor) -> torch.Tensor:
    """0-based ranks of ``x`` ascending, tied values sharing the mean of the ranks they span."""
    values, order = torch.sort(x.double(), stable=True)
    ranks = torch.empty(len(x), dtype=torch.float64)
    start = 0
    for end in range(1, len(x) + 1):
        if end == len(x) or values[end] != values[start]:
            ranks[order[start:end]] = (start + end - 1) / 2
            start = end
    return ranks


def tie_groups(ref: torch.Tensor, tie: float) -> torch.Tensor:
    """Each score's tie, numbered from the lowest: scores of ``ref`` that chain within ``tie`` of each other share
    one."""
    values, order = torch.sort(ref.double(), stable=True)
    apart = (values[1:] - values[:-1] > tie).long()
    groups = torch.empty(len(ref), dtype=torch.long)
    groups[order] = torch.cat([torch.zeros(1, dtype=torch.long), apart.cumsum(0)])
    return groups


def spearman(a: torch.Tensor, b: torch.Tensor, tie: float = 0.0) -> float:
    """Spearman's rho of ``a`` against the reference ``b``, ties at their average rank: ``b``'s scores that chain
    within ``tie`` are one tie, and ``a``'s scores of those documents are taken as tied too. 1 where ``b`` is one tie,
    0 where ``a`` is constant and ``b`` is not."""
    groups = tie_groups(b, tie)
    a = a.double().clone()
    for g in groups.unique():
        members = groups == g
        a[members] = a[members].mean()
    ra, rb = average_ranks(a), average_ranks(groups)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    norm = float(torch.sqrt((ra * ra).sum() * (rb * rb).sum()))
    if norm == 0:
        return 1.0 if bool((ra == 0).all() and (rb == 0).all()) else 0.0
    return float((ra * rb).sum()) / norm


def rerank_agreement(out: list[torch.Tensor], ref: list[torch.Tensor], tie: float = TIE) -> RerankAgreement:
    """``out[i]`` and ``ref[i]``: the scores of list i's documents, by the precision under test and by fp32."""
    if (
        not ref
        or len(out) != len(ref)
        or any(o.shape != r.shape or r.numel() < 2 for o, r in zip(out, ref, strict=True))
    ):
        raise ValueError("rerank_agreement needs the same lists, of 2 documents or more, from both precisions")
    rhos, agree, margins, worst = [], [], [0.0], 0.0
    for o, r in zip(out, ref, strict=True):
        o, r = o.double().flatten(), r.double().flatten()
        rhos.append(spearman(o, r, tie))
        gap = float(r.max() - r[o.argmax()])
        agree.append(gap <= tie)
        if gap > tie:
            margins.append(gap)
        worst = max(worst, float((o - r).abs().max()))
    return RerankAgreement(
        lists=len(ref),
        spearman_mean=sum(rhos) / len(rhos),
        spearman_min=min(rhos),
        top1=sum(agree) / len(agree),
        top1_margin=max(margins),
        max_abs_diff=worst,
    )


@dataclass(frozen=True)
class LabelAgreement:
    """Texts classified by a precision against fp32's logits of the same texts."""

    texts: int
    label_agreement: float
    max_abs_diff: float  # of any logit
    min_margin: float  # fp32's smallest gap between a text's two highest logits
    near_ties: int  # texts whose fp32 gap is at most twice max_abs_diff: where an error of that size may flip a label

    def failures(self, artifact: str) -> list[AccuracyGateError]:
        return _failures(self, LABEL_MIN, artifact, "classify")

    @property
    def passed(self) -> bool:
        return not self.failures("")

    def as_dict(self) -> dict:
        return _as_dict(self, LABEL_MIN)


def label_agreement(out: torch.Tensor, ref: torch.Tensor, tie: float = TIE) -> LabelAgreement:
    """``out``, ``ref``: logits ``[texts, labels]`` by the precision under test and by fp32."""
    if out.shape != ref.shape or ref.dim() != 2 or ref.shape[0] < 1 or ref.shape[1] < 2:
        raise ValueError(
            f"label_agreement needs logits [texts, labels >= 2] of one shape, got {out.shape}, {ref.shape}"
        )
    out, ref = out.double(), ref.double()
    chosen = ref.gather(1, out.argmax(1, keepdim=True)).squeeze(1)
    agree = chosen >= ref.max(1).values - tie
    top2 = ref.topk(2, dim=1).values
    margin = top2[:, 0] - top2[:, 1]
    worst = float((out - ref).abs().max())
    return LabelAgreement(
        texts=int(ref.shape[0]),
        label_agreement=float(agree.double().mean()),
        max_abs_diff=worst,
        min_margin=float(margin.min()),
        near_ties=int((margin <= 2 * worst).sum()),
    )
