"""The Python path's text pairs (serving/python_backend/pairs.py) against transformers' fast tokenizer, as a user
calls it: `tok(first, second, truncation=..., max_length=...)`."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer

from serving.python_backend import pairs
from serving.python_backend.errors import RequestError
from tests.unit.backend import multilingual

ROOT = Path(__file__).resolve().parents[3]


def corpus_pairs() -> list[tuple[str, str]]:
    lines = []
    for path in (ROOT / "loadtest/data/corpus.txt", ROOT / "export/data/sentences.txt"):
        lines += [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    lines += list(multilingual.texts())[:1000]
    others = lines[:]
    random.Random(0).shuffle(others)
    return list(zip(lines, others, strict=True)) + [
        (" ".join([a] * 9), b) for a, b in zip(lines[:100], others, strict=False)
    ]


@pytest.mark.parametrize("max_seq", [256, 17, 8])
def test_pairs_match_transformers_ids_type_ids_and_truncation(tiny_checkpoint, max_seq):
    tok = AutoTokenizer.from_pretrained(str(tiny_checkpoint))
    encoder = pairs.PairEncoder(tiny_checkpoint / "tokenizer.json", max_seq)
    batch = corpus_pairs()
    assert len(batch) >= 1400
    for strategy in pairs.STRATEGIES:
        refused = 0
        for (a, b), got in zip(batch, encoder.encode(batch, strategy), strict=True):
            if isinstance(got, RequestError):
                refused += 1
                assert strategy == "only_second" and got.reason == "too_long", got
                with pytest.raises(Exception):  # noqa: B017 - transformers raises its own error types
                    tok(a, b, truncation=strategy, max_length=max_seq)
                continue
            ref = tok(a, b, truncation=strategy, max_length=max_seq, return_overflowing_tokens=False)
            whole = tok(a, b)["input_ids"]
            assert (got.ids, got.type_ids) == (ref["input_ids"], ref["token_type_ids"]), (strategy, a, b)
            assert bool(got.overflowing) == (len(whole) > max_seq)
        assert refused == 0 if strategy == "longest_first" else refused > 0  # 9-fold first texts fill 256


def test_padded_rows_carry_type_ids_and_mask(tiny_checkpoint):
    encoder = pairs.PairEncoder(tiny_checkpoint / "tokenizer.json", 64)
    encs = encoder.encode([("short", "pair"), ("a somewhat longer first text", "and its second text")], "longest_first")
    ids, mask, types = pairs.padded(encs)
    assert ids.shape == mask.shape == types.shape == (2, len(encs[1].ids))
    np.testing.assert_array_equal(mask[0], [1] * len(encs[0].ids) + [0] * (ids.shape[1] - len(encs[0].ids)))
    np.testing.assert_array_equal(types[0, : len(encs[0].ids)], encs[0].type_ids)
    assert types[0].max() == 1 and types[0, len(encs[0].ids) :].sum() == 0


def test_an_unknown_truncation_is_the_clients_error():
    assert pairs.strategy_of({}) == "longest_first"
    assert pairs.strategy_of({"truncation": "only_second"}) == "only_second"
    with pytest.raises(RequestError, match="truncation must be one of longest_first, only_second, got 'only_first'"):
        pairs.strategy_of({"truncation": "only_first"})
