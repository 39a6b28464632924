"""Text pairs for a cross-encoder: `[CLS] A [SEP] B [SEP]`, type ids 0 then 1, cut as the checkpoint's fast
tokenizer cuts them (`longest_first` or `only_second`). Pure Python over `tokenizers`, no Triton types."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tokenizers import Encoding, Tokenizer

from serving.python_backend.errors import RequestError

# The `truncation` request parameter: how a pair longer than max_seq is cut.
STRATEGIES = ("longest_first", "only_second")
DEFAULT_STRATEGY = "longest_first"


def strategy_of(parameters: dict) -> str:
    """The request's ``truncation`` parameter, checked."""
    value = parameters.get("truncation", DEFAULT_STRATEGY)
    if value not in STRATEGIES:
        raise RequestError("bad_parameter", f"truncation must be one of {', '.join(STRATEGIES)}, got {value!r:.64}")
    return value


class PairEncoder:
    """One tokenizer.json, one loaded copy per truncation strategy (the setting is the tokenizer's state)."""

    def __init__(self, tokenizer_json: Path, max_seq: int) -> None:
        self.max_seq = max_seq
        self.by_strategy: dict[str, Tokenizer] = {}
        for strategy in STRATEGIES:
            tok = Tokenizer.from_file(str(tokenizer_json))
            tok.no_padding()
            tok.enable_truncation(max_seq, strategy=strategy)
            self.by_strategy[strategy] = tok

    def encode(self, pairs: list[tuple[str, str]], strategy: str) -> list[Encoding | RequestError]:
        """Per pair its encoding, or the error of a pair that `only_second` cannot fit."""
        tok = self.by_strategy[strategy]
        try:
            return list(tok.encode_batch(pairs))
        except Exception:  # one pair refused fails the batch: find it, keep the others
            return [self._encode_one(tok, pair) for pair in pairs]

    def _encode_one(self, tok: Tokenizer, pair: tuple[str, str]) -> Encoding | RequestError:
        try:
            return tok.encode(*pair)
        except Exception:
            return RequestError(
                "too_long",
                f"the first text fills the max length of {self.max_seq} tokens; only_second cannot cut the second "
                "enough (use truncation=longest_first or a shorter query)",
            )


def padded(encodings: list[Encoding]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(input_ids, attention_mask, token_type_ids), int64 [rows, longest], zero-padded on the right."""
    rows = [(e.ids, e.type_ids) for e in encodings]  # each property builds a new list: read once
    width = max(len(ids) for ids, _ in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    types = np.zeros_like(ids)
    mask = np.zeros_like(ids)
    for k, (row, row_types) in enumerate(rows):
        ids[k, : len(row)] = row
        types[k, : len(row)] = row_types
        mask[k, : len(row)] = 1
    return ids, mask, types
