"""Text pairs in the native tokenizer (backend/src/tokenizer/) against the Hugging Face fast tokenizer.

A pair is `[CLS] A [SEP] B [SEP]` with type ids 0 for the first part and 1 for the second, both contents cut as
the `tokenizers` crate cuts them (`longest_first`, `only_second`). Ids, type ids and the truncated flag must all
match, on the inputs of the single-text equality tests (test_native_tokenizer.py) paired up: the shipped corpora,
the multilingual set, the fuzz generator's elements and long texts, each at the serving length and at short
lengths where nearly every pair is cut, plus every length combination of a small grid. Code points of
KNOWN_DIFFERENCES are taken out first: the single-text tests account for them.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from tests.unit.backend import multilingual
from tests.unit.backend import native_core as nc
from tests.unit.backend.test_native_tokenizer import KNOWN_DIFFERENCES, MAX_SEQ, fuzz_elements, long_texts

ROOT = Path(__file__).resolve().parents[3]
STRATEGIES = ("longest_first", "only_second")
SHORT = (3, 4, 16, 17, 31)  # odd and even budgets; 3 leaves no content at all


@pytest.fixture(scope="module")
def core():
    return nc.load()


@pytest.fixture(scope="module")
def tokenizer_json(tiny_checkpoint) -> Path:
    return tiny_checkpoint / "tokenizer.json"


@pytest.fixture(scope="module")
def native(core, tokenizer_json):
    tok = nc.NativeTokenizer(core, tokenizer_json)
    yield tok
    tok.close()


class Reference:
    """The fast tokenizer as the Python serving path loads it, one truncation setting at a time."""

    def __init__(self, tokenizer_json: Path) -> None:
        self.tok = Tokenizer.from_file(str(tokenizer_json))
        self.tok.no_padding()

    def encode(self, pairs: list[tuple[str, str]], max_len: int, strategy: str) -> list[nc.Pair | str]:
        self.tok.enable_truncation(max_len, strategy=strategy)
        try:
            return [(e.ids, e.type_ids, bool(e.overflowing)) for e in self.tok.encode_batch(pairs)]
        except Exception:  # a pair only_second refuses fails the batch: one at a time
            pass
        out: list[nc.Pair | str] = []
        for a, b in pairs:
            try:
                enc = self.tok.encode(a, b)
            except Exception as e:  # only_second with a first text that fills max_len
                assert "not long enough" in str(e) or "too short" in str(e).lower(), e
                out.append("first_too_long")
                continue
            out.append((enc.ids, enc.type_ids, bool(enc.overflowing)))
        return out


@pytest.fixture(scope="module")
def reference(tokenizer_json) -> Reference:
    return Reference(tokenizer_json)


def clean(text: str) -> str:
    return "".join(c for c in text if ord(c) not in KNOWN_DIFFERENCES)


def paired(texts: list[str], seed: int = 0) -> list[tuple[str, str]]:
    """Each text with a random other one, and the first few with themselves (equal lengths)."""
    texts = list(dict.fromkeys(clean(t) for t in texts))
    others = texts[:]
    random.Random(seed).shuffle(others)
    return list(zip(texts, others, strict=True)) + [(t, t) for t in texts[:50]]


def mismatches(reference, native, pairs, max_lens=(MAX_SEQ, *SHORT)) -> tuple[int, list]:
    """(comparisons made, the first differing ones) over both strategies and every max_len."""
    compared, wrong = 0, []
    raw = [(a.encode(), b.encode()) for a, b in pairs]
    for strategy in STRATEGIES:
        for max_len in max_lens:
            mine = native.encode_pairs(raw, max_len, strategy)
            expected = reference.encode(pairs, max_len, strategy)
            compared += len(pairs)
            wrong += [(strategy, max_len, p, e, m) for p, e, m in zip(pairs, expected, mine, strict=True) if e != m]
    return compared, wrong[:3]


def test_the_pair_template_is_read(native, reference):
    assert native.pair_unsupported() is None
    (ids, types, truncated), *_ = native.encode_pairs([(b"a question?", b"an answer.")], MAX_SEQ, "longest_first")
    cls, sep = reference.tok.token_to_id("[CLS]"), reference.tok.token_to_id("[SEP]")
    assert ids[0] == cls and ids.count(sep) == 2 and not truncated
    assert types == [0] * (ids.index(sep) + 1) + [1] * (len(ids) - ids.index(sep) - 1)


def test_every_length_combination_cuts_as_the_reference(native, reference):
    """Contents of 0-24 one-token words each, at max_len 3-30: each case of longest_first (one cut, both cut,
    ties, the odd token) and of only_second (cut, refused)."""
    pairs = [(" ".join(["cat"] * n1), " ".join(["dog"] * n2)) for n1 in range(25) for n2 in range(25)]
    compared, wrong = mismatches(reference, native, pairs, max_lens=tuple(range(3, 31)))
    assert compared == 2 * 28 * 625 and not wrong, wrong


def test_shipped_corpora_pairs_give_identical_ids_and_type_ids(native, reference):
    lines = []
    for path in (ROOT / "loadtest/data/corpus.txt", ROOT / "export/data/sentences.txt"):
        lines += [line for line in path.read_text().splitlines() if line.strip()]
    compared, wrong = mismatches(reference, native, paired(lines + [line.upper() for line in lines]))
    assert compared >= 2 * 6 * 700 and not wrong, wrong


def test_multilingual_pairs_give_identical_ids_and_type_ids(native, reference):
    texts = list(multilingual.texts())
    compared, wrong = mismatches(reference, native, paired(texts))
    assert compared >= 2 * 6 * 2000 and not wrong, wrong


def test_fuzz_pairs_give_identical_ids_and_type_ids(native, reference):
    """The fuzz generator's distinct UTF-8 elements (about 5,500 of its 10,500 requests' elements), each paired
    with another."""
    elements = []
    for raw in dict.fromkeys(fuzz_elements()):
        try:
            elements.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            continue
    compared, wrong = mismatches(reference, native, paired(elements), max_lens=(MAX_SEQ, 17))
    assert compared >= 2 * 2 * 5000 and not wrong, wrong


def test_long_text_pairs_give_identical_ids_and_type_ids(native, reference):
    """Texts of 2-12 KiB paired: both pass the budget, so the odd token goes by the full lengths."""
    texts = [t.decode() for t in long_texts(30, seed=1)]
    compared, wrong = mismatches(reference, native, paired(texts), max_lens=(MAX_SEQ, 255, 1 << 16))
    assert compared >= 2 * 3 * 30 and not wrong, wrong


def test_invalid_utf8_in_either_text_is_reported(native):
    got = native.encode_pairs([(b"ok", b"\xff"), (b"\xc3", b"ok"), (b"ok", b"ok")], MAX_SEQ, "longest_first")
    assert got[:2] == ["not_utf8", "not_utf8"] and isinstance(got[2], tuple)


def test_transformers_fast_tokenizer_agrees(native, tiny_checkpoint):
    """The transformers call a user makes (`tok(a, b, truncation=..., max_length=...)`) is the same reference."""
    tok = AutoTokenizer.from_pretrained(str(tiny_checkpoint))
    pairs = paired(Path(ROOT / "export/data/sentences.txt").read_text().splitlines()[:100])
    for strategy in STRATEGIES:
        for max_len in (MAX_SEQ, 17):
            mine = native.encode_pairs([(a.encode(), b.encode()) for a, b in pairs], max_len, strategy)
            for (a, b), got in zip(pairs, mine, strict=True):
                if got == "first_too_long":
                    with pytest.raises(Exception):  # noqa: B017 - transformers raises its own error types
                        tok(a, b, truncation=strategy, max_length=max_len)
                    continue
                enc = tok(a, b, truncation=strategy, max_length=max_len)
                assert (enc["input_ids"], enc["token_type_ids"]) == got[:2], (strategy, max_len, a, b)


def test_a_template_without_pairs_refuses_pairs_but_serves_single_texts(core, tokenizer_json, tmp_path):
    import json

    spec = json.loads(tokenizer_json.read_text())
    spec["post_processor"]["pair"] = [p for p in spec["post_processor"]["pair"] if "SpecialToken" in p]
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    tok = nc.NativeTokenizer(core, path)
    try:
        assert "pair template without both sequences" in tok.pair_unsupported()
        assert tok.encode([b"still fine"], MAX_SEQ)[0] is not None
    finally:
        tok.close()
