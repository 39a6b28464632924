"""The encoder on the native backend against the Python backend: the same exported artifact, one run.

    python -m bench.backends --repository model_repository --rounds 3

The repository's encoders are served as exported (native) and from a copy whose encoders run in the Python
backend (the twin: same artifact files, config and model.py switched). Rounds alternate which server goes first;
each round also times the served artifact in-process (serving.python_backend.runtime, batch 1), the reference the served
figures are held to. Per server: time to ready, resident memory of tritonserver and its stubs, perf_analyzer on
``bert`` at concurrency 1 for each token length and at the sweep's concurrencies for the first length.
Writes reports/backends-<label>.json and .md; the tables quote medians over the rounds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from bench.native_embed import write_ensemble
from bench.report import machine
from bench.timing import served_artifact_ms
from export.model_configs import QueuePolicy, parse
from export.repository import SERVING_MODELS, file_hashes
from loadtest.config import LoadTestConfig, int_list
from loadtest.payload import build_pool, perf_analyzer_input_data
from loadtest.perf_analyzer_compare import ensure_perf_analyzer, run_perf_analyzer
from reliability import processes
from reliability.copies import rewrite_config
from serving.contract import native
from serving.contract.manifest import MANIFEST, REPOSITORY_INDEX, read

log = logging.getLogger("bench.backends")
BACKENDS = ("native", "python")
# The Python encoder as it shipped before the native backend: a 1 s queue timeout. With today's 50 ms, the
# requests its batcher holds for the 500 ms poll are refused instead, and perf_analyzer stops at the first.
PYTHON_QUEUE_TIMEOUT_US = 1_000_000


def python_twin(repo: Path, dest: Path) -> Path:
    """A copy of ``repo`` whose native encoders run in the Python backend instead (artifacts untouched), configured
    as export configured a Python encoder: the queue policy it sheds through (as it shipped), the batcher delay."""
    from google.protobuf import text_format

    shutil.copytree(repo, dest, symlinks=True)  # a real copy: rewrite_config replaces files in place
    index = json.loads((dest / REPOSITORY_INDEX).read_text())
    text_models = []
    # export gives a Python encoder the tokenizer's batcher delay (a native one takes none)
    delay = parse((dest / "tokenizer" / "config.pbtxt").read_text()).dynamic_batching.max_queue_delay_microseconds
    for name, spec in index["models"].items():
        if spec["backend"] != native.NAME:
            continue
        config = parse((dest / name / "config.pbtxt").read_text())
        if config.input[0].name == "TEXT":  # the native embed: the twin serves the tokenizer + bert ensemble
            text_models.append(name)
            continue
        config.backend = "python"
        config.dynamic_batching.max_queue_delay_microseconds = delay
        config.parameters["EXECUTION_ENV_PATH"].string_value = sys.prefix
        (dest / name / "config.pbtxt").write_text(text_format.MessageToString(config))
        rewrite_config(dest / name, QueuePolicy(2 * config.max_batch_size, PYTHON_QUEUE_TIMEOUT_US))
        shutil.copyfile(SERVING_MODELS / "bert.py", dest / name / "1" / "model.py")
        manifest = read(dest / name)
        manifest["files"] = file_hashes(dest / name)
        (dest / name / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        spec["backend"] = "python"
    (dest / REPOSITORY_INDEX).write_text(json.dumps(index, indent=2) + "\n")
    for name in text_models:
        write_ensemble(dest, name)
    return dest


def serve_and_measure(repo: Path, args: argparse.Namespace, data: dict[int, Path], work: Path) -> dict[str, Any]:
    binary, libdir = ensure_perf_analyzer(args.build)
    server = processes.start(repo, work / f"{repo.name}.log")
    try:
        ready_s = server.wait_ready(180, poll_s=0.05)
        rss = sum(processes.rss_bytes(p) for p in server.processes()) / (1 << 20)
        steps = []
        plan = [(n, 1) for n in args.tokens] + [(args.tokens[0], c) for c in args.concurrency if c != 1]
        for n, conc in plan:
            csv = work / f"{repo.name}-{n}-c{conc}.csv"
            try:
                r = run_perf_analyzer(
                    binary, libdir, server.grpc_url, "bert", conc, data[n], csv, args.window_ms, 50.0, 4
                )
            except RuntimeError as e:
                log.error("%s %d tokens c=%d: %s", repo.name, n, conc, e)
                r = {"error": str(e)}
            steps.append({"tokens": n, "concurrency": conc, **r})
            log.info("%s %d tokens c=%d: %s", repo.name, n, conc, r)
        rss_after = sum(processes.rss_bytes(p) for p in server.processes()) / (1 << 20)
    finally:
        processes.stop(server)
    return {"ready_s": ready_s, "rss_mib": rss, "rss_after_mib": rss_after, "steps": steps}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(rounds: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for backend in BACKENDS:
        runs = [r[backend] for r in rounds]
        rows = {}
        for step in runs[0]["steps"]:
            key = f"{step['tokens']} tokens, c={step['concurrency']}"
            same = [
                s
                for r in runs
                for s in r["steps"]
                if (s["tokens"], s["concurrency"]) == (step["tokens"], step["concurrency"])
            ]
            ok = [s for s in same if "error" not in s]
            rows[key] = {k: _median([s[k] for s in ok]) for k in ("throughput", "p50_ms", "p99_ms")}
            rows[key]["errors"] = len(same) - len(ok)
        table[backend] = {
            "ready_s": _median([r["ready_s"] for r in runs]),
            "rss_mib": _median([r["rss_after_mib"] for r in runs]),
            "steps": rows,
        }
    table["in_process"] = {
        str(n): {k: _median([r["in_process"][n][k] for r in rounds]) for k in ("p50_ms", "p99_ms")} for n in args.tokens
    }
    return table


def markdown(result: dict[str, Any]) -> str:
    t = result["table"]
    where = result["machine"].get("gpu") or result["machine"].get("cpu", "")
    lines = [
        f"# Encoder backends, native vs Python ({where}, {result['rounds']} rounds, medians)",
        "",
        f"Repository: `{result['repository']}`; command: `{result['command']}`",
        "",
        "| step | native thr/s | native p50 / p99 ms | Python thr/s | Python p50 / p99 ms | in-process p50 / p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    for key, nat in t["native"]["steps"].items():
        py = t["python"]["steps"][key]
        tokens, conc = key.split(" tokens, c=")
        ip = t["in_process"].get(tokens) if conc == "1" else None
        ip_text = f"{ip['p50_ms']:.2f} / {ip['p99_ms']:.2f}" if ip else ""

        def cell(r: dict[str, Any]) -> tuple[str, str]:
            if r["p50_ms"] is None:
                return "error", "error"
            return f"{r['throughput']:.0f}", f"{r['p50_ms']:.2f} / {r['p99_ms']:.2f}"

        lines.append(f"| {key} | {' | '.join(cell(nat))} | {' | '.join(cell(py))} | {ip_text} |")
    lines += [
        "",
        f"Ready: native {t['native']['ready_s']:.2f} s, Python {t['python']['ready_s']:.2f} s. Resident memory "
        f"(tritonserver + stubs, after the run): native {t['native']['rss_mib']:.0f} MiB, "
        f"Python {t['python']['rss_mib']:.0f} MiB.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.backends", description=__doc__.split("\n\n")[0])
    p.add_argument("--repository", type=Path, default=Path("model_repository"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int_list, default=(16, 128), help="token lengths timed at concurrency 1")
    p.add_argument("--concurrency", type=int_list, default=(4, 8), help="the sweep, at the first token length")
    p.add_argument("--window-ms", type=int, default=3000, help="perf_analyzer measurement interval")
    p.add_argument("--in-process-calls", type=int, default=1000)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the in-process reference runs")
    p.add_argument("--label", default="cpu")
    p.add_argument("--build", type=Path, default=Path("build"))
    p.add_argument("--output-dir", type=Path, default=Path("reports"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    if args.device == "cpu":
        torch.set_num_threads(len(os.sched_getaffinity(0)))
    work = Path(tempfile.mkdtemp(prefix="bench-backends-"))
    repos = {
        "native": args.repository.resolve(),
        "python": python_twin(args.repository.resolve(), work / "python-twin"),
    }
    data = {}
    for n in args.tokens:
        pool = build_pool(LoadTestConfig(seed=0, payload="fixed", token_length=n), "tokens")
        data[n] = work / f"tokens-{n}.json"
        data[n].write_text(json.dumps(perf_analyzer_input_data(pool)))
    rounds = []
    for i in range(args.rounds):
        order = BACKENDS if i % 2 == 0 else BACKENDS[::-1]
        result: dict[str, Any] = {
            "in_process": served_artifact_ms(repos["native"], args.tokens, args.in_process_calls, args.device)
        }
        for backend in order:
            result[backend] = serve_and_measure(repos[backend], args, data, work)
        log.info("round %d: %s", i + 1, json.dumps(result))
        rounds.append(result)
    out = {
        "machine": machine(args.device),
        "repository": str(args.repository),
        "command": "python -m bench.backends " + " ".join(argv if argv is not None else sys.argv[1:]),
        "rounds": args.rounds,
        "table": summarise(rounds, args),
        "raw": rounds,
    }
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / f"backends-{args.label}.json").write_text(json.dumps(out, indent=2) + "\n")
    (args.output_dir / f"backends-{args.label}.md").write_text(markdown(out))
    sys.stdout.write(markdown(out))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
