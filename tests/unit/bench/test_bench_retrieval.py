"""`make bench`'s retrieval column: each variant searched over export's retrieval set against the first one scored."""

from __future__ import annotations

import torch
from transformers import AutoTokenizer

from bench.config import BenchConfig
from bench.run import RetrievalScorer
from bench.variants import Variant
from export.checkpoint import minilm_path

TABLE = torch.randn(30522, 32, generator=torch.Generator().manual_seed(0))


def _variant(name: str, noise: float = 0.0, shapes: frozenset | None = None) -> Variant:
    """Mean of a seeded embedding table over the unmasked ids, with seeded noise of `noise` per dimension."""

    def call(args: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        ids, mask = args
        m = mask.unsqueeze(-1).float()
        out = (TABLE[ids] * m).sum(1) / m.sum(1)
        gen = torch.Generator().manual_seed(int(ids.sum()))
        return out + noise * torch.randn(out.shape, generator=gen)

    return Variant(name, "fp32", call, lambda ids, mask: (ids, mask), lambda out: out, shapes=shapes)


def test_the_reference_agrees_with_itself_and_a_noisy_variant_does_not():
    scorer = RetrievalScorer(BenchConfig(batches=(8,), seqs=(64,)), AutoTokenizer.from_pretrained(str(minilm_path())))
    same = scorer.score(_variant("reference"))
    assert same == {"nn_agreement": 1.0, "recall_at_10": 1.0, "min_cosine": same["min_cosine"]}
    assert same["min_cosine"] > 0.99999
    noisy = scorer.score(_variant("noisy", noise=0.05))
    assert noisy["nn_agreement"] < 0.99 and noisy["recall_at_10"] < 0.99 and noisy["min_cosine"] < 0.999


def test_a_variant_built_for_some_shapes_only_is_not_scored():
    scorer = RetrievalScorer(BenchConfig(), AutoTokenizer.from_pretrained(str(minilm_path())))
    assert scorer.score(_variant("graphs", shapes=frozenset({(1, 16)}))) is None
    assert scorer.verifier is None  # nor made the reference
