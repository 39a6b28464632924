from __future__ import annotations

import numpy as np
import pytest

from serving.python_backend import batching
from serving.python_backend.errors import RequestError


def test_buckets_cover_up_to_the_limit():
    assert batching.length_buckets(256) == [16, 32, 48, 64, 96, 128, 192, 256]
    assert batching.length_buckets(100) == [16, 32, 48, 64, 96, 100]
    assert batching.length_buckets(128) == [16, 32, 48, 64, 96, 128]
    assert batching.length_buckets(16) == [16] and batching.length_buckets(40) == [16, 32, 40]
    assert batching.batch_buckets(32) == [1, 2, 4, 8, 16, 32]
    assert batching.batch_buckets(12) == [1, 2, 4, 8, 12]
    assert batching.bucket_for(17, [16, 32]) == 32 and batching.bucket_for(16, [16, 32]) == 16


def _ok(n: int = 5, rows: int = 1) -> tuple[np.ndarray, np.ndarray]:
    return np.full((rows, n), 1000, np.int64), np.ones((rows, n), np.int64)


def test_validate_returns_effective_lengths():
    ids, mask = _ok(6, rows=2)
    mask[1, 3:] = 0
    assert batching.validate(ids, mask, 30522, 256).tolist() == [6, 3]


@pytest.mark.parametrize(
    ("ids", "mask", "reason", "message"),
    [
        (np.full((1, 3), 30522), np.ones((1, 3)), "bad_token_id", r"input_ids\[0\]\[0\] = 30522 is outside"),
        (np.array([[1, -1, 2]]), np.ones((1, 3)), "bad_token_id", "outside the vocabulary"),
        (np.ones((1, 3)), np.array([[1, 2, 1]]), "bad_attention_mask", "0 or 1"),
        (np.ones((1, 3)), np.zeros((1, 3)), "bad_attention_mask", "row 0 selects no token"),
        (np.ones((1, 3)), np.ones((1, 4)), "bad_shape", "differs from input_ids"),
        (np.ones((1, 0)), np.ones((1, 0)), "bad_shape", "empty"),
        (np.ones((0, 3)), np.ones((0, 3)), "bad_shape", "empty"),
        (np.ones((1, 3)), np.array([[1, -1, 1]]), "bad_attention_mask", "0 or 1"),
        (np.ones(3), np.ones(3), "bad_shape", r"\[batch, seq\]"),
        (np.ones((1, 300)), np.ones((1, 300)), "too_long", "300 tokens is longer than the max length 256"),
    ],
)
def test_validate_rejects_with_reason_and_message(ids, mask, reason, message):
    with pytest.raises(RequestError, match=message) as exc:
        batching.validate(ids.astype(np.int64), mask.astype(np.int64), 30522, 256)
    assert exc.value.reason == reason


def _requests(lengths: list[int]) -> dict:
    out = {}
    for i, n in enumerate(lengths):
        ids = np.arange(1, n + 1, dtype=np.int64)[None, :] + 100 * i
        mask = np.ones_like(ids)
        out[i] = (ids, mask, batching.validate(ids, mask, 10**6, 256))
    return out


def test_collate_groups_by_length_bucket_and_keeps_rows():
    reqs = _requests([3, 20, 5, 200])
    c = batching.collate(reqs, [16, 32, 64, 128, 256], None)
    shapes = [g.ids.shape for g in c.groups]
    assert shapes == [(2, 16), (1, 32), (1, 256)]
    for g in c.groups:
        for k, (req, row) in enumerate(g.rows):
            n = reqs[req][2][row]
            np.testing.assert_array_equal(g.ids[k, :n], reqs[req][0][row, :n])
            assert g.mask[k, :n].all() and not g.mask[k, n:].any()
    assert c.real_tokens == 3 + 20 + 5 + 200
    assert c.padded_tokens == 2 * 16 + 32 + 256 - c.real_tokens
    assert 0 < c.padding_ratio < 1


def test_collate_pads_batch_to_a_bucket_with_harmless_rows():
    c = batching.collate(_requests([4, 4, 4]), [16], [1, 2, 4, 8])
    (g,) = c.groups
    assert g.ids.shape == (4, 16) and len(g.rows) == 3
    assert g.mask[3].tolist() == [1] + [0] * 15  # a batch-padding row attends to one token only


def test_client_padding_is_trimmed_before_bucketing():
    ids = np.full((1, 100), 7, np.int64)
    mask = np.zeros((1, 100), np.int64)
    mask[0, :10] = 1
    c = batching.collate({0: (ids, mask, batching.validate(ids, mask, 100, 256))}, [16, 32, 64, 128], None)
    assert c.groups[0].ids.shape == (1, 16)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "empty_text"),
        ("\u2003\t\n".encode(), "empty_text"),
        (b"\xff\xfe", "invalid_utf8"),
        ("\ud800".encode("utf-8", "surrogatepass"), "invalid_utf8"),
        (b"a" * (batching.MAX_TEXT_BYTES + 1), "text_too_large"),
    ],
)
def test_decode_text_names_what_is_wrong(raw, reason):
    with pytest.raises(RequestError) as e:
        batching.decode_text(raw)
    assert e.value.reason == reason and str(e.value)


def test_decode_text_takes_edge_cases_up_to_the_limit():
    assert batching.decode_text(b"a" * batching.MAX_TEXT_BYTES) == "a" * batching.MAX_TEXT_BYTES
    for text in ("nul\x00inside", "e\u0301", "\u05e9\u05dc\u05d5\u05dd", "\U0001f469\u200d\U0001f467", "\u200b"):
        assert batching.decode_text(text.encode()) == text


def _gpu_like_costs(batches: list[int], lens: list[int]) -> dict:
    """A fixed 0.5 per pass plus 0.001 per padded token (the shape of the H200's measured costs)."""
    return {(b, s): 0.5 + 0.001 * b * s for b in batches for s in lens}


def test_merge_buckets_pads_a_few_short_rows_into_the_long_pass_when_a_pass_of_their_own_costs_more():
    costs = _gpu_like_costs([1, 2, 4, 8, 16, 32], [16, 32, 64, 128])
    # Apart: 2x16 (0.532) + 6 rows padded to 8x128 (1.524); together 8x128 alone (1.524).
    assert batching.merge_buckets({16: 2, 128: 6}, [1, 2, 4, 8, 16, 32], costs) == [[16, 128]]
    # Apart: 16x16 (0.756) + 8x128 (1.524); together 24 rows padded to 32x128 (4.596).
    assert batching.merge_buckets({16: 16, 128: 8}, [1, 2, 4, 8, 16, 32], costs) == [[16], [128]]


def test_merge_buckets_never_plans_a_pass_beyond_the_largest_batch_bucket():
    costs = _gpu_like_costs([1, 2, 4, 8], [16, 128])
    assert batching.merge_buckets({16: 2, 128: 7}, [1, 2, 4, 8], costs) == [[16], [128]]


def test_merge_buckets_without_a_fixed_cost_keeps_every_bucket_apart():
    costs = {(b, s): 0.001 * b * s for b in [1, 2, 4, 8] for s in [16, 32, 64]}
    assert batching.merge_buckets({16: 1, 32: 1, 64: 1}, [1, 2, 4, 8], costs) == [[16], [32], [64]]


def test_collate_with_costs_merges_buckets_and_keeps_every_row():
    reqs = _requests([3, 20, 100, 110])
    lens, batches = [16, 32, 64, 128], [1, 2, 4, 8]
    c = batching.collate(reqs, lens, batches, _gpu_like_costs(batches, lens))
    (g,) = c.groups
    assert g.ids.shape == (4, 128)
    assert sorted(g.rows) == [(0, 0), (1, 0), (2, 0), (3, 0)]
    for k, (req, row) in enumerate(g.rows):
        n = reqs[req][2][row]
        np.testing.assert_array_equal(g.ids[k, :n], reqs[req][0][row, :n])
        assert g.mask[k, :n].all() and not g.mask[k, n:].any()
    assert c.real_tokens == 3 + 20 + 100 + 110


def test_decode_texts_names_the_bad_element_of_several_as_the_native_backend_does():
    good = np.array([[b"hello"], [b"world"]], dtype=np.object_)
    assert batching.decode_texts(good) == ["hello", "world"]
    with pytest.raises(RequestError, match=r"^TEXT element 1: TEXT is empty$") as e:
        batching.decode_texts(np.array([[b"hello"], [b"  "]], dtype=np.object_))
    assert e.value.reason == "empty_text"
    with pytest.raises(RequestError, match=r"^TEXT is empty$"):  # one element: no index, as before
        batching.decode_texts(np.array([[b" "]], dtype=np.object_))
