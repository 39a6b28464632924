"""The native backend's validation and collation (backend/src/batching.cc) against serving/python_backend/batching.py.

The C++ logic is loaded through the C surface of libbertserve_core.so (built by ``make backend``) and fed the same
random requests as the Python reference: a request the two judge differently is a bug in one of them.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from serving.launcher import native
from serving.python_backend import batching
from serving.python_backend.errors import RequestError

I64 = ctypes.POINTER(ctypes.c_int64)
CORE = native.LIBRARY.parent / "libbertserve_core.so"
VOCAB, MAX_SEQ = 1000, 64


@pytest.fixture(scope="module")
def core() -> ctypes.CDLL:
    assert CORE.is_file(), f"{CORE} is missing: run `make backend`"
    lib = ctypes.CDLL(str(CORE))
    lib.bertserve_session_new.restype = ctypes.c_void_p
    lib.bertserve_session_free.argtypes = [ctypes.c_void_p]
    lib.bertserve_session_add.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        I64,
        I64,
        ctypes.c_int64,
        ctypes.c_int64,
        I64,
    ]
    lib.bertserve_session_collate.restype = ctypes.c_size_t
    lib.bertserve_session_collate.argtypes = [
        ctypes.c_void_p, I64, ctypes.c_size_t, I64, ctypes.c_size_t, ctypes.POINTER(ctypes.c_double)
    ]  # fmt: skip
    return lib


def _ptr(a: np.ndarray) -> ctypes._Pointer:
    return a.ctypes.data_as(I64)


def native_validate(core: ctypes.CDLL, ids: np.ndarray, mask: np.ndarray) -> np.ndarray | tuple[str, str]:
    ids, mask = np.ascontiguousarray(ids, np.int64), np.ascontiguousarray(mask, np.int64)
    ids_shape, mask_shape = np.array(ids.shape, np.int64), np.array(mask.shape, np.int64)
    lengths = np.zeros(max(ids.shape[0], 1) if ids.ndim else 1, np.int64)
    reason, message = ctypes.create_string_buffer(64), ctypes.create_string_buffer(512)
    rc = core.bertserve_validate(
        _ptr(ids), _ptr(ids_shape), ctypes.c_size_t(ids.ndim), _ptr(mask), _ptr(mask_shape), ctypes.c_size_t(mask.ndim),
        ctypes.c_int64(VOCAB), ctypes.c_int64(MAX_SEQ), _ptr(lengths), reason, ctypes.c_size_t(64), message,
        ctypes.c_size_t(512),
    )  # fmt: skip
    if rc:
        return reason.value.decode(), message.value.decode()
    return lengths[: ids.shape[0]]


def python_validate(ids: np.ndarray, mask: np.ndarray) -> np.ndarray | tuple[str, str]:
    try:
        return batching.validate(ids.astype(np.int64), mask.astype(np.int64), VOCAB, MAX_SEQ)
    except RequestError as e:
        return e.reason, str(e)


def random_request(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Mostly valid requests, with every kind of fault the validation knows mixed in."""
    rows, seq = int(rng.integers(0, 4)), int(rng.integers(0, MAX_SEQ + 8))
    ids = rng.integers(0, VOCAB, (rows, seq))
    lengths = rng.integers(1, seq + 1, rows) if seq else np.zeros(rows, np.int64)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    fault = rng.integers(0, 10)
    if ids.size and fault == 0:
        ids.flat[rng.integers(0, ids.size)] = rng.choice([-1, VOCAB, VOCAB + 7, -(2**40)])
    elif mask.size and fault == 1:
        mask.flat[rng.integers(0, mask.size)] = rng.choice([2, -1, 3])
    elif rows and fault == 2:
        mask[rng.integers(0, rows)] = 0
    elif mask.size and fault == 3:
        mask.flat[rng.integers(0, mask.size)] ^= 1  # holes inside a row
    elif fault == 4:
        mask = mask[:, : max(seq - 1, 0)]
    elif fault == 5:
        ids, mask = ids.reshape(-1), mask.reshape(-1)
    return ids, mask


def test_validation_agrees_with_the_python_reference(core):
    rng = np.random.default_rng(7)
    kinds = set()
    for _ in range(5000):
        ids, mask = random_request(rng)
        expected, got = python_validate(ids, mask), native_validate(core, ids, mask)
        if isinstance(expected, tuple):
            assert got == expected, (ids, mask)
            kinds.add(expected[0])
        else:
            np.testing.assert_array_equal(got, expected)
            kinds.add("valid")
    assert kinds == {"valid", "bad_shape", "too_long", "bad_token_id", "bad_attention_mask"}


def _collate_both(core, requests: dict, len_buckets: list[int], batch_buckets: list[int] | None, costs):
    session = ctypes.c_void_p(core.bertserve_session_new())
    try:
        for index, (ids, mask, lengths) in requests.items():
            core.bertserve_session_add(session, index, _ptr(ids), _ptr(mask), ids.shape[0], ids.shape[1], _ptr(lengths))
        lens = np.array(len_buckets, np.int64)
        batches = np.array(batch_buckets or [], np.int64)
        table = None
        if costs is not None:
            flat = np.array([[costs[(b, s)] for s in len_buckets] for b in batch_buckets], np.float64)
            table = flat.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
        n = core.bertserve_session_collate(session, _ptr(lens), len(lens), _ptr(batches), len(batches), table)
        real, padded = ctypes.c_int64(), ctypes.c_int64()
        core.bertserve_session_tokens(session, ctypes.byref(real), ctypes.byref(padded))
        groups = []
        for g in range(n):
            b, s, n_rows = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_size_t()
            ids_p, mask_p = I64(), I64()
            rows = np.zeros(2 * 1024, np.int64)
            core.bertserve_session_group(
                session, ctypes.c_size_t(g), ctypes.byref(b), ctypes.byref(s), ctypes.byref(ids_p),
                ctypes.byref(mask_p), ctypes.byref(n_rows), _ptr(rows),
            )  # fmt: skip
            shape = (b.value, s.value)
            ids = np.ctypeslib.as_array(ids_p, shape=shape).copy()
            mask = np.ctypeslib.as_array(mask_p, shape=shape).copy()
            groups.append((ids, mask, [tuple(r) for r in rows[: 2 * n_rows.value].reshape(-1, 2).tolist()]))
        return groups, real.value, padded.value
    finally:
        core.bertserve_session_free(session)


@pytest.mark.parametrize("mode", ["cpu", "batch buckets", "measured costs"])
def test_collation_agrees_with_the_python_reference(core, mode):
    rng = np.random.default_rng({"cpu": 1, "batch buckets": 2, "measured costs": 3}[mode])
    len_buckets, batch_buckets = batching.length_buckets(MAX_SEQ), batching.batch_buckets(32)
    merged = 0
    for _ in range(300):
        requests = {}
        for index in range(int(rng.integers(1, 9))):
            rows, seq = int(rng.integers(1, 4)), int(rng.integers(1, MAX_SEQ + 1))
            ids = rng.integers(1, VOCAB, (rows, seq))
            mask = (np.arange(seq)[None, :] < rng.integers(1, seq + 1, rows)[:, None]).astype(np.int64)
            requests[index] = (ids, mask, batching.validate(ids, mask, VOCAB, MAX_SEQ))
        buckets = None if mode == "cpu" else batch_buckets
        costs = None
        if mode == "measured costs":  # a floor per pass plus a cost per padded token, with noise
            costs = {(b, s): 1.0 + b * s / 256 * rng.uniform(0.5, 1.5) for b in batch_buckets for s in len_buckets}
        expected = batching.collate(requests, len_buckets, buckets, costs)
        groups, real, padded = _collate_both(core, requests, len_buckets, buckets, costs)
        assert (real, padded) == (expected.real_tokens, expected.padded_tokens)
        assert len(groups) == len(expected.groups)
        for (ids, mask, rows), g in zip(groups, expected.groups, strict=True):
            np.testing.assert_array_equal(ids, g.ids)
            np.testing.assert_array_equal(mask, g.mask)
            assert rows == g.rows
        merged += len(expected.groups) < len(
            {batching.bucket_for(int(n), len_buckets) for _, _, ls in requests.values() for n in ls}
        )
    if mode == "measured costs":
        assert merged > 0  # the cost model did merge length buckets in some batches
