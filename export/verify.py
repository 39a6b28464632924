"""Accuracy gates: every artifact against the eager fp32 model on a shipped sentence set, and each precision's
served artifact on the retrieval set (export.retrieval_set): does every text keep its nearest neighbours?"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from importlib import resources

import torch
from transformers import PreTrainedTokenizerFast

from export import retrieval_set
from export.artifacts import Runner
from export.errors import AccuracyGateError

MIN_COSINE = {"fp32": 0.999, "fp16": 0.999, "int8": 0.99, "fp8": 0.99}
MIN_SPEARMAN = 0.98
# The retrieval gate: a precision whose served artifact misses any of these does not serve `bert`.
RETRIEVAL_MIN = {"nn_agreement": 0.98, "recall_at_10": 0.98, "min_cosine": 0.995}
RECALL_K = 10
RETRIEVAL_BATCH = 32  # texts per forward when scoring the retrieval set (length-sorted: little padding)


def sentences() -> list[str]:
    text = resources.files("export").joinpath("data/sentences.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip()]


def pairs() -> list[tuple[str, str]]:
    text = resources.files("export").joinpath("data/pairs.tsv").read_text(encoding="utf-8")
    rows = [line.split("\t") for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return [(a, b) for a, b in rows]


def calibration_batches(tokenizer: PreTrainedTokenizerFast, max_seq: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """int8 calibration: the shipped pair sentences (kept apart from the gate's sentence set), in batches of 8."""
    texts = [t for pair in pairs() for t in pair]
    out = []
    for i in range(0, len(texts), 8):
        enc = tokenizer(texts[i : i + 8], padding=True, truncation=True, max_length=max_seq, return_tensors="pt")
        out.append((enc["input_ids"], enc["attention_mask"]))
    return out


@dataclass(frozen=True)
class Accuracy:
    min_cosine: float
    mean_cosine: float
    spearman: float

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 6) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Retrieval:
    """Each text of the retrieval set searched against the whole set (itself left out), against eager fp32's search."""

    texts: int
    nn_agreement: float  # share of texts whose nearest neighbour is fp32's (or one fp32 ranks exactly as near)
    recall_at_10: float  # mean share of the 10 found among fp32's 10 nearest (or as near as fp32's 10th)
    min_cosine: float  # of each text's embedding against fp32's

    def failures(self, artifact: str) -> list[AccuracyGateError]:
        """One error per metric below its floor in RETRIEVAL_MIN."""
        return [
            AccuracyGateError(artifact, f"retrieval {metric}", getattr(self, metric), floor)
            for metric, floor in RETRIEVAL_MIN.items()
            if getattr(self, metric) < floor
        ]

    @property
    def passed(self) -> bool:
        return not self.failures("")

    def as_dict(self) -> dict[str, float | int | bool]:
        return {
            **{k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(self).items()},
            "passed": self.passed,
        }


def _search(emb: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine similarities of every pair (the diagonal masked out) and each row's k nearest, nearest first."""
    emb = torch.nn.functional.normalize(emb.double(), dim=1)
    sims = emb @ emb.T
    sims.fill_diagonal_(-float("inf"))
    return sims, sims.topk(k, dim=1).indices


def retrieval(out: torch.Tensor, ref: torch.Tensor, k: int = RECALL_K, tie: float = 1e-6) -> Retrieval:
    """Nearest-neighbour agreement and recall@k of ``out``'s search against ``ref``'s over the same texts."""
    ref_sims, ref_top = _search(ref, k)
    _, out_top = _search(out, k)
    # a neighbour the reference ranks as near as its own choice is not a miss (exact ties, e.g. texts that tokenize
    # alike): found = among the reference's k nearest, or as near as its k-th
    agree = ref_sims.gather(1, out_top[:, :1]) >= ref_sims.gather(1, ref_top[:, :1]) - tie
    overlap = (ref_sims.gather(1, out_top) >= ref_sims.gather(1, ref_top[:, -1:]) - tie).double().mean(1)
    cos = torch.nn.functional.cosine_similarity(out.double(), ref.double(), dim=1)
    return Retrieval(len(ref), float(agree.double().mean()), float(overlap.mean()), float(cos.min()))


class Verifier:
    """Holds the fp32 reference embeddings; scores and gates any runner against them."""

    def __init__(
        self, reference: Runner, tokenizer: PreTrainedTokenizerFast, max_seq: int, batch: int = 8, max_batch: int = 8
    ) -> None:
        self.tokenizer, self.max_seq, self.batch = tokenizer, max_seq, batch
        self.retrieval_batch = min(RETRIEVAL_BATCH, max(batch, max_batch))
        self.texts = sentences()
        pair_list = pairs()
        self.pair_texts = [t for pair in pair_list for t in pair]
        # The reference runs one text at a time: no padding at all.
        self.ref = torch.cat([self._embed(reference, [t]) for t in self.texts])
        self.ref_pair_sims = self._pair_sims(reference)
        # Retrieval texts in batches of similar length (little padding, as the native backend's buckets).
        texts = [t.text for t in retrieval_set.load()]
        lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=max_seq)["input_ids"]]
        self.retrieval_texts = [t for _, t in sorted(zip(lengths, texts, strict=True), key=lambda lt: lt[0])]
        self.retrieval_ref = self._embed_batched(reference, self.retrieval_texts, self.retrieval_batch)

    def _embed(self, run: Runner, texts: list[str]) -> torch.Tensor:
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_seq, return_tensors="pt")
        return run(enc["input_ids"], enc["attention_mask"]).float()

    def _embed_batched(self, run: Runner, texts: list[str], batch: int | None = None) -> torch.Tensor:
        batch = batch or self.batch
        return torch.cat([self._embed(run, texts[i : i + batch]) for i in range(0, len(texts), batch)])

    def _pair_sims(self, run: Runner) -> torch.Tensor:
        emb = self._embed_batched(run, self.pair_texts)
        return (emb[0::2] * emb[1::2]).sum(dim=1)

    def score(self, run: Runner) -> Accuracy:
        """Cosine per sentence (in padded batches, as served) and Spearman of the pair-similarity ranking."""
        out = self._embed_batched(run, self.texts)
        cos = torch.nn.functional.cosine_similarity(out, self.ref, dim=1)
        return Accuracy(float(cos.min()), float(cos.mean()), spearman(self._pair_sims(run), self.ref_pair_sims))

    def retrieval(self, run: Runner) -> Retrieval:
        """The retrieval set searched with ``run``'s embeddings against eager fp32's."""
        return retrieval(self._embed_batched(run, self.retrieval_texts, self.retrieval_batch), self.retrieval_ref)

    def gate(self, artifact: str, precision: str, run: Runner) -> Accuracy:
        acc = self.score(run)
        if acc.min_cosine < MIN_COSINE[precision]:
            raise AccuracyGateError(artifact, "minimum cosine", acc.min_cosine, MIN_COSINE[precision])
        if acc.spearman < MIN_SPEARMAN:
            raise AccuracyGateError(artifact, "pair-ranking Spearman", acc.spearman, MIN_SPEARMAN)
        return acc


def _ranks(x: torch.Tensor) -> torch.Tensor:
    order = torch.argsort(x)
    ranks = torch.empty_like(x, dtype=torch.float64)
    ranks[order] = torch.arange(len(x), dtype=torch.float64)
    return ranks


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    ra, rb = _ranks(a.double()), _ranks(b.double())
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / torch.sqrt((ra * ra).sum() * (rb * rb).sum()))
