"""Validate requests (texts, token ids) and collate ids into padded length/batch buckets (pure numpy, no Triton)."""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from serving.python_backend.errors import RequestError

PAD_ID = 0


def _doubling(start: int, limit: int) -> list[int]:
    """start, 2*start, 4*start, ... below limit, then limit itself."""
    out, b = [], start
    while b < limit:
        out.append(b)
        b *= 2
    return [*out, limit]


def length_buckets(max_seq: int) -> list[int]:
    """16, 32, 48, 64, 96, 128, ...: doubling, with the midpoint of each step from 32 on (a row pads by at most a
    third past 32 tokens, not a half), up to max_seq (always included)."""
    out = []
    for b in _doubling(16, max_seq)[:-1]:
        out.append(b)
        if b >= 32 and b + b // 2 < max_seq:
            out.append(b + b // 2)
    return [*out, max_seq]


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, ... up to max_batch (always included)."""
    return _doubling(1, max_batch)


def bucket_for(value: int, buckets: list[int]) -> int:
    return buckets[bisect.bisect_left(buckets, value)]


# The longest TEXT element accepted, in bytes. max_seq tokens of any script fit many times over (a WordPiece
# token is at most ~100 bytes of UTF-8); past this the tokenizer would spend time and memory on text it truncates.
MAX_TEXT_BYTES = 64 * 1024


def decode_text(raw: object) -> str:
    """One TEXT element as str, or the RequestError that names what is wrong with it."""
    if not isinstance(raw, bytes):
        raw = str(raw).encode()
    if len(raw) > MAX_TEXT_BYTES:
        raise RequestError("text_too_large", f"TEXT element is {len(raw)} bytes; the limit is {MAX_TEXT_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(
            "invalid_utf8", f"TEXT is not valid UTF-8 (byte {e.start}: {raw[e.start : e.start + 1]!r})"
        ) from None
    if not text.strip():
        raise RequestError("empty_text", "TEXT is empty")
    return text


def decode_texts(raw: np.ndarray) -> list[str]:
    """A request's TEXT elements, each checked by ``decode_text``; a bad one is named by its index when the request
    holds several (as the native backend names it)."""
    texts = []
    for i, element in enumerate(raw.reshape(-1)):
        try:
            texts.append(decode_text(element))
        except RequestError as e:
            if raw.size > 1:
                raise RequestError(e.reason, f"TEXT element {i}: {e}") from None
            raise
    return texts


def validate(ids: np.ndarray, mask: np.ndarray, vocab_size: int, max_seq: int) -> np.ndarray:
    """Check one request's [rows, seq] ids and mask; return each row's effective length (through its last 1).

    Both are integer arrays (the model configs declare TYPE_INT64, which Triton enforces).
    """
    if ids.ndim != 2 or mask.ndim != 2:
        raise RequestError("bad_shape", f"input_ids and attention_mask must be [batch, seq], got {ids.shape}")
    if ids.shape != mask.shape:
        raise RequestError(
            "bad_shape", f"attention_mask shape {list(mask.shape)} differs from input_ids shape {list(ids.shape)}"
        )
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise RequestError("bad_shape", f"input_ids {list(ids.shape)} is empty: a request needs a row of tokens")
    if ids.shape[1] > max_seq:
        raise RequestError("too_long", f"sequence of {ids.shape[1]} tokens is longer than the max length {max_seq}")
    # Few whole-array passes: the stub runs this between idle waits, with cold caches, where every numpy call
    # costs several times its warm figure (np.isin alone was ~17 µs warm). Negative ids wrap to huge unsigned values.
    if ids.astype(np.int64, copy=False).view(np.uint64).max() >= vocab_size:
        row, col = np.argwhere((ids < 0) | (ids >= vocab_size))[0]
        raise RequestError(
            "bad_token_id", f"input_ids[{row}][{col}] = {ids[row, col]} is outside the vocabulary [0, {vocab_size})"
        )
    if (mask.astype(np.int64, copy=False) & ~1).any():  # a bit other than the lowest: neither 0 nor 1
        raise RequestError("bad_attention_mask", "attention_mask values must be 0 or 1")
    any_token = mask.any(axis=1)
    if not any_token.all():
        raise RequestError("bad_attention_mask", f"attention_mask row {int(np.argmin(any_token))} selects no token")
    return ids.shape[1] - np.argmax(mask[:, ::-1], axis=1)


@dataclass
class Group:
    """One forward pass: rows of one or more adjacent length buckets, padded to [batch bucket, the longest one]."""

    ids: np.ndarray
    mask: np.ndarray
    rows: list[tuple[int, int]] = field(default_factory=list)  # (request index, row index) per real row


@dataclass
class Collated:
    groups: list[Group]
    real_tokens: int
    padded_tokens: int

    @property
    def padding_ratio(self) -> float:
        total = self.real_tokens + self.padded_tokens
        return self.padded_tokens / total if total else 0.0


# (batch bucket, length bucket) -> seconds per forward pass
Costs = Mapping[tuple[int, int], float]


def merge_buckets(rows: dict[int, int], batch_bucket_list: list[int], costs: Costs) -> list[list[int]]:
    """Partition the length buckets in use into runs that each become one forward pass, cheapest in total.

    ``rows``: rows per length bucket. A run pads its rows to its longest bucket and their count to a batch
    bucket. On a GPU a pass has a fixed floor (a 1x128 pass costs about a quarter of a 32x128 one), so a few
    short rows are cheaper padded into the long rows' pass than in a pass of their own. On a tie the shorter run
    wins (less padding).
    """
    lens = sorted(rows)
    best: list[tuple[float, list[list[int]]]] = [(0.0, [])]  # best[j]: the first j buckets
    for j in range(1, len(lens) + 1):
        options = []
        for i in reversed(range(j)):  # the run lens[i:j], shortest first
            count = sum(rows[s] for s in lens[i:j])
            if count > batch_bucket_list[-1]:
                break  # longer runs only hold more rows
            cost = costs[(bucket_for(count, batch_bucket_list), lens[j - 1])]
            options.append((best[i][0] + cost, [*best[i][1], lens[i:j]]))
        best.append(min(options, key=lambda o: o[0]))
    return best[-1][1]


def collate(
    requests: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]],
    len_buckets: list[int],
    batch_bucket_list: list[int] | None,
    costs: Costs | None = None,
) -> Collated:
    """Group rows by length bucket (bounding padding waste); pad batch to a bucket when given (CUDA graphs).

    With ``costs`` (measured per batch and length bucket), adjacent length buckets share a pass where that is
    cheaper (:func:`merge_buckets`).
    """
    by_bucket: dict[int, list[tuple[int, int, int]]] = {}
    for req, (_, _, lengths) in requests.items():
        for row, n in enumerate(lengths):
            by_bucket.setdefault(bucket_for(int(n), len_buckets), []).append((req, row, int(n)))
    runs = [[s] for s in sorted(by_bucket)]
    if costs is not None and batch_bucket_list is not None and len(runs) > 1:
        runs = merge_buckets({s: len(m) for s, m in by_bucket.items()}, batch_bucket_list, costs)
    groups, real = [], 0
    for run in runs:
        seq, members = run[-1], [m for s in run for m in by_bucket[s]]
        rows = len(members) if batch_bucket_list is None else bucket_for(len(members), batch_bucket_list)
        ids = np.full((rows, seq), PAD_ID, dtype=np.int64)
        mask = np.zeros((rows, seq), dtype=np.int64)
        for i, (req, row, n) in enumerate(members):
            ids[i, :n] = requests[req][0][row, :n]
            mask[i, :n] = requests[req][1][row, :n]
            real += int(mask[i, :n].sum())
        mask[len(members) :, 0] = 1  # batch-padding rows attend to one token: no fully masked softmax
        groups.append(Group(ids, mask, [(req, row) for req, row, _ in members]))
    total = sum(g.ids.size for g in groups)
    return Collated(groups, real, total - real)
