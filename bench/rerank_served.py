"""Rerank and classify beside embed through running servers, concurrency 1, over gRPC:

    python -m bench.rerank_served --rerank-url 127.0.0.1:8001 --classify-url 127.0.0.1:8101 \
        --embed-url 127.0.0.1:9001 [--gateway-url 127.0.0.1:8080] [--requests 200]

rerank: 1 query x 32 documents of about 60 tokens each (shipped-corpus lines joined); embed: the same 32 documents
as 32 texts of one request. classify: 1 short text (the corpus' first line), beside embed of that one text. The
cases run interleaved (one call of each in turn, then the next round), so a drift of the machine touches all
alike; each after 10 uncounted warm-up rounds. ``--gateway-url`` (the rerank server's gateway) adds the rerank
case through TEI's ``/rerank`` and Cohere's ``/v1/rerank`` (which also counts the pairs' tokens for its usage). ``--short-only`` runs the one-short-text cases alone. Prints a
markdown table of p50 / p99 / mean in milliseconds (the cases of a server that is not given are left out).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
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


def timed_ms(calls: dict[str, Callable[[], object]], requests: int) -> dict[str, list[float]]:
    """Each case's latencies, the cases called in turn round after round."""
    for _ in range(WARMUP):
        for call in calls.values():
            call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(requests):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append((time.perf_counter() - start) * 1e3)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rerank-url", default="")
    parser.add_argument("--classify-url", default="")
    parser.add_argument("--embed-url", default="")
    parser.add_argument("--gateway-url", default="", help="the rerank server's gateway: /rerank and /v1/rerank too")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--short-only", action="store_true", help="only the one-short-text cases (embed, classify)")
    args = parser.parse_args(argv)
    query, docs = documents()
    calls: dict[str, Callable[[], object]] = {}
    if args.rerank_url and not args.short_only:
        rc = grpcclient.InferenceServerClient(args.rerank_url)
        pairs = [_bytes_input("QUERY", [query], [1, 1]), _bytes_input("DOCUMENTS", docs, [1, len(docs)])]
        calls["rerank 1 x 32 (~60 tokens)"] = lambda: rc.infer("rerank", pairs)
    if args.gateway_url and not args.short_only:
        import httpx

        http = httpx.Client(base_url=f"http://{args.gateway_url}", timeout=30)
        tei, cohere = {"query": query, "texts": docs, "truncate": True}, {"query": query, "documents": docs}
        calls["rerank 1 x 32, gateway /rerank"] = lambda: http.post("/rerank", json=tei).raise_for_status()
        calls["rerank 1 x 32, gateway /v1/rerank"] = lambda: http.post("/v1/rerank", json=cohere).raise_for_status()
    if args.embed_url:
        ec = grpcclient.InferenceServerClient(args.embed_url)
        texts, short = [_bytes_input("TEXT", docs, [len(docs), 1])], [_bytes_input("TEXT", [query], [1, 1])]
        if not args.short_only:
            calls["embed 32 texts (~60 tokens)"] = lambda: ec.infer("embed", texts)
        calls["embed 1 short text"] = lambda: ec.infer("embed", short)
    if args.classify_url:
        cc = grpcclient.InferenceServerClient(args.classify_url)
        one = [_bytes_input("TEXT", [query], [1, 1])]
        calls["classify 1 short text"] = lambda: cc.infer("classify", one)
    lines = ["| case (c=1) | p50 ms | p99 ms | mean ms |", "|---|---|---|---|"]
    for name, times in timed_ms(calls, args.requests).items():
        p50, p99 = np.percentile(times, [50, 99])
        lines.append(f"| {name} | {p50:.2f} | {p99:.2f} | {statistics.fmean(times):.2f} |")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
