"""The served benchmark: start tritonserver on an exported repository, time it to ready, then per payload case
measure concurrency 1 with the load tester and perf_analyzer, and sweep perf_analyzer's concurrency for the
highest throughput whose p99 stays inside the budget.

    python -m bench.served --repository model_repository --cases embed-16 --client-cpus 1
    python -m bench.served --repository build/gpu-repository --cases bert-128,embed-corpus --concurrency 1,8,32,128

Writes reports/served-<label>.json and .md. Cases: bert-128 (token ids, 128 tokens), embed-16 (texts of 16
tokens), embed-corpus (the shipped sentences, median 23 tokens); a suffix -bN (bert-128-b8) sends N sequences
per request in the perf_analyzer sweep (its throughput counts sequences) and skips the concurrency-1 latency run;
a suffix @C/C/.. (embed-corpus-b32@1/4/8) sweeps that case over its own concurrency list instead of --concurrency.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import split
from loadtest.config import LoadTestConfig, int_list
from loadtest.payload import build_pool, perf_analyzer_input_data
from loadtest.perf_analyzer_compare import ensure_perf_analyzer, run_loadtest, run_perf_analyzer
from reliability import processes

log = logging.getLogger("bench.served")


@dataclass(frozen=True)
class Case:
    model: str
    payload: str  # corpus | fixed
    tokens: int = 16

    def config(self, seed: int) -> LoadTestConfig:
        return LoadTestConfig(seed=seed, payload=self.payload, token_length=self.tokens)

    def loadtest_args(self) -> list[str]:
        return ["--payload", self.payload, "--token-length", str(self.tokens)]


CASES = {
    "bert-128": Case("bert", "fixed", 128),
    "embed-16": Case("embed", "fixed", 16),
    "embed-corpus": Case("embed", "corpus"),
    # The ensemble of the Python tokenizer and bert, where bench/native_embed.py serves it beside a native embed.
    "ensemble-16": Case("embed_ensemble", "fixed", 16),
    "ensemble-corpus": Case("embed_ensemble", "corpus"),
    # The native embed with another batcher delay, where bench/native_embed.py --delay-us serves it.
    "delay-16": Case("embed_delay", "fixed", 16),
    "delay-corpus": Case("embed_delay", "corpus"),
    # The native tokenizer model: the same texts, read, tokenized and answered with no batching and no device, so
    # its throughput is what tritonserver's frontend and the client deliver on this host: a ceiling for embed's.
    "tokenizer-corpus": Case("tokenizer", "corpus"),
}


def parse_case(name: str) -> tuple[Case, int]:
    """``bert-128`` -> (that case, 1 sequence per request); ``bert-128-b8`` -> (the same case, 8)."""
    base, batch = name, 1
    matched = re.fullmatch(r"(.+)-b([1-9][0-9]*)", name)
    if matched:
        base, batch = matched[1], int(matched[2])
    if base not in CASES:
        raise KeyError(name)
    return CASES[base], batch


def split_spec(spec: str, default: tuple[int, ...]) -> tuple[str, tuple[int, ...]]:
    """``embed-corpus@1/16`` -> (``embed-corpus``, (1, 16)); without ``@`` the default concurrency list."""
    name, _, levels = spec.partition("@")
    return name, int_list(levels.replace("/", ",")) if levels else default


def run_case(
    name: str, concurrency: tuple[int, ...], server: processes.ServerProcess, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    case, batch = parse_case(name)  # main checked every name
    binary, libdir = ensure_perf_analyzer(args.build)
    pool = build_pool(case.config(args.seed), "tokens" if case.model == "bert" else "text")
    data = work / f"{name}-input.json"
    data.write_text(json.dumps(perf_analyzer_input_data(pool)), encoding="utf-8")

    url = server.grpc_url

    def pa(conc: int) -> dict[str, Any]:
        out = work / f"{name}-pa-c{conc}.csv"
        before = _scrape(server)
        try:
            r = run_perf_analyzer(
                binary, libdir, url, case.model, conc, data, out, args.window_ms, 50.0, max_trials=4, batch=batch
            )
        except RuntimeError as e:  # e.g. a request that outwaited the queue timeout: recorded, the sweep goes on
            log.error("%s perf_analyzer c=%d: %s", name, conc, e)
            return {"concurrency": conc, "error": str(e)}
        # perf_analyzer's trials all fall between the scrapes, so these are means over every trial, not the last.
        after = _scrape(server)
        models = split.model_split(before, after) if before is not None and after is not None else {}
        log.info("%s perf_analyzer c=%d: %s; per model: %s", name, conc, r, models)
        return {"concurrency": conc, **r, "models": models}

    ours = None
    if batch == 1:
        ours = run_loadtest(url, case.model, 1, args.duration_s, work / f"{name}-lt", args.seed, case.loadtest_args())
        log.info("%s loadtest c=1: %s", name, ours)
    sweep = [pa(c) for c in concurrency]
    inside = [r for r in sweep if "error" not in r and r["p99_ms"] <= args.budget_ms]
    return {
        "model": case.model,
        "payload": case.payload,
        "tokens": case.tokens if case.payload == "fixed" else None,
        "sequences_per_request": batch,
        "c1_loadtest": ours,
        "sweep": sweep,
        "best_inside_budget": max(inside, key=lambda r: r["throughput"]) if inside else None,
    }


def _scrape(server: processes.ServerProcess) -> split.Samples | None:
    """The metrics port's samples, or None (logged) when it does not answer: the step is measured without them."""
    try:
        return split.scrape(server.metrics_url)
    except OSError as e:
        log.error("metrics port %s: %s", server.metrics_url, e)
        return None


def _row(step: dict[str, Any]) -> str:
    if "error" in step:
        return f"| {step['concurrency']} | failed: {step['error'][-120:]} | | |"
    return f"| {step['concurrency']} | {step['throughput']:.0f} | {step['p50_ms']:.3f} | {step['p99_ms']:.3f} |"


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Served benchmark ({result['label']})",
        "",
        f"Server ready {result['ready_s']:.1f} s after start. Budget p99 <= {result['budget_ms']:g} ms.",
        "",
    ]
    for name, r in result["cases"].items():
        c1 = r["c1_loadtest"]
        lines += [f"## {name} ({r['model']}, {r['sequences_per_request']} sequence(s) per request)", ""]
        if c1:
            lines += [
                f"loadtest, concurrency 1: p50 {c1['p50_ms']:.3f} ms, p99 {c1['p99_ms']:.3f} ms, "
                f"{c1['throughput']:.0f} req/s",
                "",
            ]
        lines += [
            "| perf_analyzer concurrency | sequences/s | p50 ms | p99 ms |",
            "| ---: | ---: | ---: | ---: |",
        ]
        lines += [_row(s) for s in r["sweep"]]
        best = r["best_inside_budget"]
        lines += ["", f"Best inside budget: {best['throughput']:.0f}/s at concurrency {best['concurrency']}" if best
                  else "No step inside the budget.", ""]  # fmt: skip
        first = next((s for s in r["sweep"] if "error" not in s), None)
        if first is not None:
            lines += split.describe(first)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.served", description=__doc__.split("\n")[0])
    p.add_argument("--repository", type=Path, default=Path("model_repository"))
    p.add_argument("--cases", default="embed-16,embed-corpus")
    p.add_argument("--concurrency", type=int_list, default=(1, 2, 4, 8, 16))
    p.add_argument("--duration-s", type=float, default=10.0, help="load tester window at concurrency 1")
    p.add_argument("--window-ms", type=int, default=4000, help="perf_analyzer measurement interval")
    p.add_argument("--budget-ms", type=float, default=10.0)
    p.add_argument("--client-cpus", default="", help="pin the load clients to these CPUs, e.g. 1 (server unpinned)")
    p.add_argument("--label", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--build", type=Path, default=Path("build"))
    p.add_argument("--output-dir", type=Path, default=Path("reports"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    specs = []
    for spec in args.cases.split(","):
        try:
            specs.append(split_spec(spec, args.concurrency))
            parse_case(specs[-1][0])
        except (KeyError, ValueError, argparse.ArgumentTypeError):
            p.error(f"unknown case {spec!r}; known: {sorted(CASES)}, each optionally with -bN and @C/C/..")

    work = args.output_dir / f"served-{args.label}-work"
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    server = processes.start(args.repository, work / "server.log")
    try:
        server.wait_ready(timeout_s=300)
        result = {"label": args.label, "ready_s": round(time.monotonic() - started, 2), "budget_ms": args.budget_ms,
                  "client_cpus": args.client_cpus, "cases": {}}  # fmt: skip
        log.info("server ready in %.1f s", result["ready_s"])
        if args.client_cpus:  # after the server started, so that only the clients (children from here) are pinned
            os.sched_setaffinity(0, {int(c) for c in args.client_cpus.split(",")})
        for name, concurrency in specs:
            result["cases"][name] = run_case(name, concurrency, server, args, work)
            write_report(result, args.output_dir)  # after every case: a run cut short keeps what it measured
    finally:
        processes.stop(server)
    sys.stdout.write(markdown(result) + "\n")
    return 0


def write_report(result: dict[str, Any], output_dir: Path) -> None:
    (output_dir / f"served-{result['label']}.json").write_text(json.dumps(result, indent=2))
    (output_dir / f"served-{result['label']}.md").write_text(markdown(result))


if __name__ == "__main__":
    sys.exit(main())
