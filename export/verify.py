"""Accuracy gates: every artifact against the eager fp32 model on a shipped sentence set."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from importlib import resources

import torch
from transformers import PreTrainedTokenizerFast

from export.artifacts import Runner
from export.errors import AccuracyGateError

MIN_COSINE = {"fp32": 0.999, "fp16": 0.999, "int8": 0.99}
MIN_SPEARMAN = 0.98


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


class Verifier:
    """Holds the fp32 reference embeddings; scores and gates any runner against them."""

    def __init__(self, reference: Runner, tokenizer: PreTrainedTokenizerFast, max_seq: int, batch: int = 8) -> None:
        self.tokenizer, self.max_seq, self.batch = tokenizer, max_seq, batch
        self.texts = sentences()
        pair_list = pairs()
        self.pair_texts = [t for pair in pair_list for t in pair]
        # The reference runs one text at a time: no padding at all.
        self.ref = torch.cat([self._embed(reference, [t]) for t in self.texts])
        self.ref_pair_sims = self._pair_sims(reference)

    def _embed(self, run: Runner, texts: list[str]) -> torch.Tensor:
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_seq, return_tensors="pt")
        return run(enc["input_ids"], enc["attention_mask"]).float()

    def _embed_batched(self, run: Runner, texts: list[str]) -> torch.Tensor:
        return torch.cat([self._embed(run, texts[i : i + self.batch]) for i in range(0, len(texts), self.batch)])

    def _pair_sims(self, run: Runner) -> torch.Tensor:
        emb = self._embed_batched(run, self.pair_texts)
        return (emb[0::2] * emb[1::2]).sum(dim=1)

    def score(self, run: Runner) -> Accuracy:
        """Cosine per sentence (in padded batches, as served) and Spearman of the pair-similarity ranking."""
        out = self._embed_batched(run, self.texts)
        cos = torch.nn.functional.cosine_similarity(out, self.ref, dim=1)
        return Accuracy(float(cos.min()), float(cos.mean()), spearman(self._pair_sims(run), self.ref_pair_sims))

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
