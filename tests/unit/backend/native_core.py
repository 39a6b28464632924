"""ctypes bindings of libbertserve_core.so (backend/tests/core_c_api.cc), built by ``make backend``."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from serving.launcher import native

CORE = native.LIBRARY.parent / "libbertserve_core.so"
I64 = ctypes.POINTER(ctypes.c_int64)
PAIR_STRATEGIES = {"longest_first": 0, "only_second": 1}
PAIR_STATUS = {2: "not_utf8", 3: "first_too_long"}
Pair = tuple[list[int], list[int], bool]


def load() -> ctypes.CDLL:
    assert CORE.is_file(), f"{CORE} is missing: run `make backend`"
    lib = ctypes.CDLL(str(CORE))
    lib.bertserve_tokenizer_new.restype = ctypes.c_void_p
    lib.bertserve_tokenizer_new.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    lib.bertserve_tokenizer_free.argtypes = [ctypes.c_void_p]
    lib.bertserve_tokenizer_encode.restype = ctypes.c_int64
    lib.bertserve_tokenizer_encode.argtypes = [
        ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t,
        ctypes.c_size_t, I64, ctypes.c_size_t, I64, ctypes.POINTER(ctypes.c_int8),
    ]  # fmt: skip
    lib.bertserve_tokenizer_encode_pairs.restype = ctypes.c_int64
    lib.bertserve_tokenizer_encode_pairs.argtypes = [
        ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t, ctypes.c_size_t,
        ctypes.c_int, I64, I64, ctypes.c_size_t, I64, ctypes.POINTER(ctypes.c_int8),
    ]  # fmt: skip
    lib.bertserve_tokenizer_pair_unsupported.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    for f in (lib.bertserve_normalize, lib.bertserve_pretokenize):
        f.restype = ctypes.c_int64
    lib.bertserve_failure_reason.argtypes = [
        ctypes.c_size_t,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_int),
    ]
    lib.bertserve_check_text.argtypes = [
        ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t
    ]  # fmt: skip
    return lib


class NativeTokenizer:
    """The native tokenizer of one tokenizer.json, as the backend loads it."""

    def __init__(self, lib: ctypes.CDLL, tokenizer_json: Path) -> None:
        self.lib = lib
        data = tokenizer_json.read_bytes()
        message = ctypes.create_string_buffer(1024)
        self.handle = lib.bertserve_tokenizer_new(data, len(data), message, 1024)
        if not self.handle:
            raise ValueError(message.value.decode())

    def close(self) -> None:
        self.lib.bertserve_tokenizer_free(self.handle)

    def encode(self, texts: list[bytes], max_len: int) -> list[tuple[list[int], bool] | None]:
        """Per text: (ids, truncated), or None for text that is not UTF-8."""
        n = len(texts)
        ptrs = (ctypes.c_char_p * n)(*texts)
        sizes = (ctypes.c_size_t * n)(*map(len, texts))
        cap = n * max_len
        ids, offsets, status = np.zeros(cap, np.int64), np.zeros(n + 1, np.int64), np.zeros(n, np.int8)
        used = self.lib.bertserve_tokenizer_encode(
            self.handle, ptrs, sizes, n, max_len, ids.ctypes.data_as(I64), cap, offsets.ctypes.data_as(I64),
            status.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
        )  # fmt: skip
        assert used >= 0
        out: list[tuple[list[int], bool] | None] = []
        for i in range(n):
            out.append(None if status[i] == 2 else (ids[offsets[i] : offsets[i + 1]].tolist(), bool(status[i])))
        return out

    def pair_unsupported(self) -> str | None:
        message = ctypes.create_string_buffer(1024)
        return (
            message.value.decode()
            if self.lib.bertserve_tokenizer_pair_unsupported(self.handle, message, 1024)
            else None
        )

    def encode_pairs(self, pairs: list[tuple[bytes, bytes]], max_len: int, strategy: str) -> list[Pair | str]:
        """Per pair: (ids, type ids, truncated), or "not_utf8" / "first_too_long" (only_second)."""
        n = len(pairs)
        firsts, seconds = [a for a, _ in pairs], [b for _, b in pairs]
        cap = n * max_len
        ids, types = np.zeros(cap, np.int64), np.zeros(cap, np.int64)
        offsets, status = np.zeros(n + 1, np.int64), np.zeros(n, np.int8)
        used = self.lib.bertserve_tokenizer_encode_pairs(
            self.handle, (ctypes.c_char_p * n)(*firsts), (ctypes.c_size_t * n)(*map(len, firsts)),
            (ctypes.c_char_p * n)(*seconds), (ctypes.c_size_t * n)(*map(len, seconds)), n, max_len,
            PAIR_STRATEGIES[strategy], ids.ctypes.data_as(I64), types.ctypes.data_as(I64), cap,
            offsets.ctypes.data_as(I64), status.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
        )  # fmt: skip
        assert used >= 0, used
        out: list[Pair | str] = []
        for i in range(n):
            span = slice(offsets[i], offsets[i + 1])
            out.append(PAIR_STATUS.get(int(status[i])) or (ids[span].tolist(), types[span].tolist(), bool(status[i])))
        return out


def _text_call(fn, *args, text: str) -> str:
    data = text.encode("utf-8")
    cap = 8 * len(data) + 64
    out = ctypes.create_string_buffer(cap)
    n = fn(*args, data, ctypes.c_size_t(len(data)), out, ctypes.c_size_t(cap))
    assert n >= 0
    return out.raw[:n].decode("utf-8")


def normalize(lib: ctypes.CDLL, text: str, clean=True, chinese=True, strip_accents=None, lowercase=True) -> str:
    strip = -1 if strip_accents is None else int(strip_accents)
    return _text_call(lib.bertserve_normalize, int(clean), int(chinese), strip, int(lowercase), text=text)


def pretokenize(lib: ctypes.CDLL, text: str) -> list[str]:
    out = _text_call(lib.bertserve_pretokenize, text=text)
    return out.split("\n") if out else []


def check_text(lib: ctypes.CDLL, raw: bytes) -> tuple[str, str] | None:
    reason, message = ctypes.create_string_buffer(64), ctypes.create_string_buffer(512)
    if lib.bertserve_check_text(raw, len(raw), reason, 64, message, 512):
        return reason.value.decode(), message.value.decode()
    return None


FAILURE_KINDS = {0: "bad_input", 1: "refused", 2: "internal"}


def failure_reasons(lib: ctypes.CDLL) -> dict[str, str]:
    """Every failure reason of the backend, by name, with its kind (bad_input, refused, internal)."""
    out, name, kind = {}, ctypes.create_string_buffer(64), ctypes.c_int()
    index = 0
    while lib.bertserve_failure_reason(index, name, 64, ctypes.byref(kind)) == 0:
        out[name.value.decode()] = FAILURE_KINDS[kind.value]
        index += 1
    assert len(out) == index, "two reasons share a name"
    return out
