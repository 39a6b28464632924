"""export/native_tokenizer.py decides whether embed becomes one native model: it must refuse what the backend
refuses (tests/unit/backend/test_native_tokenizer.py holds the backend to the same cases)."""

from __future__ import annotations

import json

import pytest

from export import native_tokenizer


@pytest.fixture(scope="module")
def spec(tiny_checkpoint) -> dict:
    return json.loads((tiny_checkpoint / "tokenizer.json").read_text())


def test_the_default_checkpoint_is_reproducible(spec):
    assert native_tokenizer.unsupported(spec) is None


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda s: {**s, "model": {**s["model"], "type": "BPE"}}, "model BPE"),
        (lambda s: {**s, "normalizer": {"type": "NFKC"}}, "normalizer NFKC"),
        (lambda s: {**s, "pre_tokenizer": {"type": "Whitespace"}}, "pre-tokenizer Whitespace"),
        (lambda s: {**s, "post_processor": {"type": "RobertaProcessing"}}, "post-processor RobertaProcessing"),
        (lambda s: {**s, "added_tokens": [{**s["added_tokens"][0], "normalized": True}]}, "is normalized"),
    ],
)
def test_what_the_native_tokenizer_cannot_reproduce_is_named(spec, change, reason):
    assert reason in native_tokenizer.unsupported(change(spec))
