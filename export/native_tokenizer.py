"""Whether the native backend can tokenize a checkpoint: the rules of backend/src/tokenizer/tokenizer.cc.

`embed` becomes one native model (text in, embedding out) only for a tokenizer.json the native tokenizer
reproduces id for id: WordPiece, BertNormalizer, BertPreTokenizer, a post-processor that adds special tokens
around one sequence, added tokens matched verbatim in the raw text. For any other, export keeps the ensemble
with the Python tokenizer and says why.
"""

from __future__ import annotations

from typing import Any

POST_PROCESSORS = (None, "BertProcessing", "TemplateProcessing")


def _type(section: Any) -> str | None:
    return section.get("type") if isinstance(section, dict) else None


def _template(post: dict[str, Any]) -> str | None:
    pieces = post.get("single", [])
    sequences = [p for p in pieces if "Sequence" in p]
    if len(sequences) != 1 or sequences[0]["Sequence"].get("id") != "A":
        return "a single template other than one $A"
    for p in pieces:
        if "SpecialToken" in p:
            ids = post.get("special_tokens", {}).get(p["SpecialToken"].get("id"), {}).get("ids", [])
            if len(ids) != 1:
                return f"special token {p['SpecialToken'].get('id')} must have exactly one id"
        elif "Sequence" not in p:
            return "a template piece other than a special token or the sequence"
    return None


def unsupported(spec: dict[str, Any]) -> str | None:
    """Why the native tokenizer cannot reproduce this tokenizer.json, or None when it can."""
    model, norm, pre, post = (spec.get(k) for k in ("model", "normalizer", "pre_tokenizer", "post_processor"))
    if _type(model) != "WordPiece":
        return f"model {_type(model)} (only WordPiece)"
    if _type(norm) != "BertNormalizer":
        return f"normalizer {_type(norm)} (only BertNormalizer)"
    if _type(pre) != "BertPreTokenizer":
        return f"pre-tokenizer {_type(pre)} (only BertPreTokenizer)"
    if _type(post) not in POST_PROCESSORS:
        return f"post-processor {_type(post)}"
    if _type(post) == "TemplateProcessing" and (why := _template(post)):
        return why
    if (spec.get("truncation") or {}).get("direction", "Right") != "Right":
        return "left truncation"
    for token in spec.get("added_tokens", []):
        if any(token.get(k) for k in ("normalized", "lstrip", "rstrip", "single_word")) or not token.get("content"):
            return f"added token {token.get('content')!r} is normalized, stripped, single-word or empty"
    if model.get("unk_token", "[UNK]") not in model.get("vocab", {}):
        return f"the unknown token {model.get('unk_token')} is not in the vocabulary"
    return None


def pair_unsupported(spec: dict[str, Any]) -> str | None:
    """Why the native tokenizer cannot encode text pairs (a cross-encoder's input) for this tokenizer.json: its
    pair template must be special tokens around $A then $B (BertProcessing's always is)."""
    post = spec.get("post_processor")
    if _type(post) == "BertProcessing":
        return None
    if _type(post) != "TemplateProcessing":
        return f"pairs with post-processor {_type(post)}"
    sequences = [p["Sequence"].get("id") for p in post.get("pair", []) if "Sequence" in p]
    if sequences != ["A", "B"]:
        return "a pair template other than $A then $B"
    for p in post.get("pair", []):
        if "SpecialToken" in p:
            ids = post.get("special_tokens", {}).get(p["SpecialToken"].get("id"), {}).get("ids", [])
            if len(ids) != 1:
                return f"special token {p['SpecialToken'].get('id')} must have exactly one id"
        elif "Sequence" not in p:
            return "a pair template piece other than a special token or a sequence"
    return None
