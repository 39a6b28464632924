"""Rerank beside embed through running servers, concurrency 1, over gRPC:

    python -m bench.rerank_served --rerank-url 127.0.0.1:8001 --embed-url 127.0.0.1:9001 [--requests 200]

rerank: 1 query x 32 documents of about 60 tokens each (shipped-corpus lines joined); embed: the same 32 documents
as 32 texts of one request. Each after 10 uncounted warm-up calls. Prints a markdown table of p50 / p99 / mean in
milliseconds (a server that is not given is left out).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tokenizers import Tokenizer

from export.checkpoint import minilm_path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = 32
DOCUMENT_TOKENS = 60
WARMUP = 10


def documents() -> tuple[str, list[str]]:
    """A query and 32 documents of about 60 tokens (MiniLM's tokenizer, special tokens excluded)."""
    tok = Tokenizer.from_file(str(minilm_path() / "tokenizer.json"))
    lines = [line for line in (ROOT / "loadtest/data/corpus.txt").read_text().splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("#")]
    docs, current = [], []
    for line in lines * 4:
        current.append(line)
        if len(tok.encode(" ".join(current), add_special_tokens=False).ids) >= DOCUMENT_TOKENS:
            docs.append(" ".join(current))
            current = []
        if len(docs) == DOCUMENTS:
            break
    return lines[0], docs


def _bytes_input(name: str, values: list[str], shape: list[int]) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, shape, "BYTES")
    tensor.set_data_from_numpy(np.array([v.encode() for v in values], dtype=np.object_).reshape(shape))
    return tensor


def timed_ms(call, requests: int) -> list[float]:
    for _ in range(WARMUP):
        call()
    times = []
    for _ in range(requests):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rerank-url", default="")
    parser.add_argument("--embed-url", default="")
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args(argv)
    query, docs = documents()
    rows = []
    if args.rerank_url:
        client = grpcclient.InferenceServerClient(args.rerank_url)
        inputs = [_bytes_input("QUERY", [query], [1, 1]), _bytes_input("DOCUMENTS", docs, [1, len(docs)])]
        rows.append(("rerank 1 x 32", timed_ms(lambda: client.infer("rerank", inputs), args.requests)))
    if args.embed_url:
        client = grpcclient.InferenceServerClient(args.embed_url)
        inputs = [_bytes_input("TEXT", docs, [len(docs), 1])]
        rows.append(("embed 32 texts", timed_ms(lambda: client.infer("embed", inputs), args.requests)))
    lines = ["| case (c=1, ~60-token documents) | p50 ms | p99 ms | mean ms |", "|---|---|---|---|"]
    for name, times in rows:
        p50, p99 = np.percentile(times, [50, 99])
        lines.append(f"| {name} | {p50:.1f} | {p99:.1f} | {statistics.fmean(times):.1f} |")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
