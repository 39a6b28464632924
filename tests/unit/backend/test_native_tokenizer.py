"""The native tokenizer (backend/src/tokenizer/) against the Hugging Face fast tokenizer that export ships.

Every id must match: a tokenizer that differs by one id is a silent accuracy bug. Compared: the shipped corpora,
the 10,500 requests of the fuzz test's text generator, a multilingual set of real text (tests/unit/backend/
multilingual.py), and every code point through the normalizer and the pre-tokenizer. The only differences are
the code points of KNOWN_DIFFERENCES (backend/README.md explains them); the tests assert that no other code
point differs and that those account for every text that differs.
"""

from __future__ import annotations

import collections
import functools
import json
import random
import string
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, normalizers, pre_tokenizers

from serving.python_backend import batching
from serving.python_backend.errors import RequestError
from tests.integration.test_fuzz import EDGE_TEXTS, text_request
from tests.unit.backend import multilingual
from tests.unit.backend import native_core as nc

ROOT = Path(__file__).resolve().parents[3]
MAX_SEQ = 256
# The reference takes general categories from Unicode 8.0 (crate unicode_categories 0.1.1); these changed
# category since, and the native tables (Unicode 14.0 restricted to 8.0's code points) have the new one.
CATEGORY_CHANGED = {
    0x166D: "CANADIAN SYLLABICS CHI SIGN: Po in 8.0 (a punctuation split), So since 12.0",
    0x111C9: "SHARADA SANDHI MARK: Po in 8.0, Mn since 9.0 (stripped as an accent)",
    0x1734: "HANUNOO SIGN PAMUDPOD: Mc in 8.0, Mn since 14.0",
    0x1885: "MONGOLIAN LETTER ALI GALI BALUDA: Lo in 8.0, Mn since 9.0",
    0x1886: "MONGOLIAN LETTER ALI GALI THREE BALUDA: Lo in 8.0, Mn since 9.0",
    0xA9BD: "JAVANESE CONSONANT SIGN KERET: Mc in 8.0, Mn since 12.0",
}
# The reference lowercases with the Rust standard library (Unicode 17.0); CPython 3.11's case mappings are 14.0.
CASE_PAIRS_AFTER_14 = (
    [0x1C89, 0xA7CB, 0xA7CC, 0xA7CE, 0xA7D2, 0xA7D4, 0xA7DA, 0xA7DC]
    + list(range(0x10D50, 0x10D66))  # Garay capitals (16.0)
    + list(range(0x16EA0, 0x16EB9))  # Beria Erfe capitals (17.0)
)
KNOWN_DIFFERENCES = set(CATEGORY_CHANGED) | set(CASE_PAIRS_AFTER_14)


@pytest.fixture(scope="module")
def core():
    return nc.load()


@pytest.fixture(scope="module")
def tokenizer_json(tiny_checkpoint) -> Path:
    return tiny_checkpoint / "tokenizer.json"  # written by transformers' save_pretrained, as export writes it


@pytest.fixture(scope="module")
def hf(tokenizer_json) -> Tokenizer:
    tok = Tokenizer.from_file(str(tokenizer_json))  # as serving/python_backend/models/tokenizer.py loads it
    tok.no_padding()
    tok.enable_truncation(MAX_SEQ)
    return tok


@pytest.fixture(scope="module")
def native(core, tokenizer_json):
    tok = nc.NativeTokenizer(core, tokenizer_json)
    yield tok
    tok.close()


def compare(
    hf: Tokenizer, native: nc.NativeTokenizer, texts: list[bytes], max_len: int = MAX_SEQ
) -> tuple[int, list[str]]:
    """(texts compared, the texts whose ids or truncation differ without a known-difference code point); `hf`
    truncates at `max_len`."""
    texts = [t for t in dict.fromkeys(texts)]
    got = native.encode(texts, max_len)
    decoded = [t.decode("utf-8") for t, g in zip(texts, got, strict=True) if g is not None]
    expected = hf.encode_batch(decoded)
    unexplained, explained = [], []
    for text, enc, mine in zip(decoded, expected, [g for g in got if g is not None], strict=True):
        if (enc.ids, bool(enc.overflowing)) != mine:
            (explained if KNOWN_DIFFERENCES & set(map(ord, text)) else unexplained).append(text)
    for text in explained:  # without its known-difference code points, the text must match
        clean = "".join(c for c in text if ord(c) not in KNOWN_DIFFERENCES)
        (ids, truncated), enc = native.encode([clean.encode()], max_len)[0], hf.encode(clean)
        if clean and (ids, truncated) != (enc.ids, bool(enc.overflowing)):
            unexplained.append(text)
    return len(decoded), unexplained


def test_every_code_point_normalizes_as_the_reference_but_the_known_differences(core):
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and cp != ord("|")]
    text = "|".join(map(chr, cps))  # "|" survives every step: one piece per code point
    differing = set()
    for clean, chinese, strip, lower in [(1, 1, None, 1), (1, 0, False, 0), (0, 0, True, 0), (0, 0, False, 1)]:
        ref = normalizers.BertNormalizer(
            clean_text=bool(clean), handle_chinese_chars=bool(chinese), strip_accents=strip, lowercase=bool(lower)
        ).normalize_str(text)
        mine = nc.normalize(core, text, clean, chinese, strip, lower)
        pairs = zip(cps, ref.split("|"), mine.split("|"), strict=True)
        differing |= {cp for cp, a, b in pairs if a != b}
    assert differing == KNOWN_DIFFERENCES - {0x166D}  # U+166D differs in the pre-tokenizer only


def test_every_code_point_pre_tokenizes_as_the_reference_but_the_known_differences(core):
    pre = pre_tokenizers.BertPreTokenizer()
    differing = set()
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    for start in range(0, len(cps), 4096):
        chunk = cps[start : start + 4096]
        words = [[w for w, _ in pre.pre_tokenize_str(f"a{chr(cp)}a")] for cp in chunk]
        mine = nc.pretokenize(core, "\u2028".join(f"a{chr(cp)}a" for cp in chunk))
        if [w for ws in words for w in ws] != mine:  # narrow down to the code points
            differing |= {cp for cp, ws in zip(chunk, words, strict=True) if ws != nc.pretokenize(core, f"a{chr(cp)}a")}
    assert differing == {0x166D, 0x111C9}


def test_each_known_difference_shows_where_expected(core, hf, native):
    """A changed category gives other ids than the reference; a newer case pair another normalized text, but the
    same ids with this vocabulary (both cases of those scripts are [UNK] in it). No entry of the list is stale."""
    for cp in sorted(KNOWN_DIFFERENCES):
        text = f"x{chr(cp)}y {chr(cp)}"
        enc, (ids, _) = hf.encode(text), native.encode([text.encode()], MAX_SEQ)[0]
        if cp in CATEGORY_CHANGED:
            assert enc.ids != ids, hex(cp)
        else:
            assert normalizers.BertNormalizer().normalize_str(text) != nc.normalize(core, text), hex(cp)
            assert enc.ids == ids and hf.token_to_id("[UNK]") in ids, hex(cp)


def test_shipped_corpora_give_identical_ids(hf, native):
    lines = []
    for path in (ROOT / "loadtest/data/corpus.txt", ROOT / "export/data/sentences.txt"):
        lines += [line.encode() for line in path.read_text().splitlines() if line.strip()]
    lines += [line.upper() for line in lines] + [b" ".join(lines)]  # cased input and one text past max_seq
    compared, unexplained = compare(hf, native, lines)
    assert compared >= 700 and not unexplained, unexplained[:3]


def test_multilingual_text_gives_identical_ids(hf, native):
    texts = multilingual.texts()
    scripts = collections.Counter(texts.values())
    assert len(texts) >= 2000 and len(scripts) >= 20, scripts
    compared, unexplained = compare(hf, native, [t.encode() for t in texts])
    assert compared == len(texts) and not unexplained, unexplained[:3]


@functools.cache  # drawn once a session: the pair tests reuse them
def fuzz_elements() -> list[bytes]:
    """The TEXT elements of 10,500 requests from the fuzz test's own generator (420 examples x 25 requests)."""
    elements: list[bytes] = []

    @settings(max_examples=420, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(text_request, min_size=25, max_size=25))
    def draw(requests):
        for r in requests:
            elements.extend(r)

    draw()
    return elements


def test_fuzz_inputs_give_identical_ids_and_the_same_validation(core, hf, native):
    elements = fuzz_elements()
    assert len(elements) >= 10_500
    for raw in dict.fromkeys(elements):  # the validation agrees with decode_text on every element
        try:
            batching.decode_text(raw)
            expected = None
        except RequestError as e:
            expected = (e.reason, str(e))
        assert nc.check_text(core, raw) == expected, raw[:80]
    edge = [t.encode() for t in EDGE_TEXTS] + [(" \u00a0\u1680\u2000\u200b\u2028\ufeff" * 9000).encode()]
    compared, unexplained = compare(hf, native, elements + edge)
    assert compared > 1000 and not unexplained, unexplained[:3]


def long_texts(count: int, seed: int = 0) -> list[bytes]:
    """Texts of 2-12 KiB: several of the tokenizer's chunks, with what could go wrong at a chunk's edge around
    every boundary (marks after a space or a full stop, added tokens, removed controls, CJK, long words)."""
    pieces = ["word", "Ünïcödé", "a\u0301", " \u0301", ".\u0301b", "[SEP]", "x[CLS]y", "[MASK]", "\v", "\t", "\x00",
              "中文", "##ab", "x" * 99, "y" * 120, ",", " ", " ", "\u00a0", "ｆｕｌｌ", "e\u0327\u0301", "(", "\u2028"]  # fmt: skip
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        size, parts = rng.randrange(2048, 12288), []
        while size > 0:
            parts.append(rng.choice(pieces))
            size -= len(parts[-1].encode())
        texts.append("".join(parts).encode())
    return texts


def test_long_texts_give_identical_ids_cut_or_whole(tokenizer_json, hf, native):
    whole = Tokenizer.from_file(str(tokenizer_json))
    whole.no_padding()
    whole.enable_truncation(1 << 16)
    texts = long_texts(60)
    for reference, max_len in [(hf, MAX_SEQ), (whole, 1 << 16)]:
        compared, unexplained = compare(reference, native, texts, max_len)
        assert compared == len(texts) and not unexplained, unexplained[:1]


def test_tokenizing_stops_at_the_budget(native):
    """32 texts of 64 KiB of long words cost about what their first 2 KiB cost: the tokens past max_seq are not
    made (before, 32 times as many were)."""
    rng = random.Random(0)
    words = [" ".join("".join(rng.choices(string.ascii_lowercase, k=99)) for _ in range(655)).encode()] * 32

    def fastest_s(texts: list[bytes]) -> float:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            native.encode(texts, MAX_SEQ)
            times.append(time.perf_counter() - start)
        return min(times)

    # Unbounded, the whole texts cost 32 times their first 2 KiB; bounded, about the same. The margin is for a busy
    # machine (a 0.1 s run is preempted more often than a 0.01 s one), not for the tokenizer.
    assert fastest_s(words) < 12 * fastest_s([w[:2048] for w in words])


def test_an_unsupported_tokenizer_is_refused_with_its_reason(core, tokenizer_json, tmp_path):
    spec = json.loads(tokenizer_json.read_text())
    for change, reason in [
        ({"model": {**spec["model"], "type": "BPE"}}, "model BPE"),
        ({"normalizer": {"type": "NFKC"}}, "normalizer NFKC"),
        ({"pre_tokenizer": {"type": "Whitespace"}}, "pre-tokenizer Whitespace"),
        ({"post_processor": {"type": "RobertaProcessing"}}, "post-processor RobertaProcessing"),
    ]:
        path = tmp_path / "tokenizer.json"
        path.write_text(json.dumps({**spec, **change}))
        with pytest.raises(ValueError, match=reason):
            nc.NativeTokenizer(core, path)
