"""``python -m bench.several_models``: what serving a second model costs. One repository of two models (an embedder
and a reranker, ``python -m export --model embed=... --model rerank=...``) served three ways: the embedder alone,
the reranker alone and both, each a fresh ``python -m serving`` (tritonserver and the gateway), in turns.

Per start: the time from the launcher's start to ``/v2/health/ready``, then each served model's first answer, and
the resident memory (RSS) of tritonserver with its children, after one request per model (its first forward is
done). The single-model servers load the same files as the pair (linked copies whose index lists fewer models), so
the difference is the second model's alone. Writes reports/several-models-cpu.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from reliability import processes
from reliability.copies import linked_copy, replace_file
from serving.contract.hardware import cpu_model
from serving.contract.manifest import REPOSITORY_INDEX, entry_points

log = logging.getLogger("bench.several_models")
MIB = 1 << 20
TEXTS = ["The quick brown fox jumps over the lazy dog."] * 4


def subset(repository: Path, tasks: set[str], work: Path) -> Path:
    """A linked copy of ``repository`` whose index lists only the models of ``tasks`` (an entry point and its
    companions: the models whose names its own start, for an embedder named `embed` every non-entry model)."""
    index = json.loads((repository / REPOSITORY_INDEX).read_text())
    entries = entry_points(index)
    keep_entries = {m for m, t in entries.items() if t in tasks}
    dropped_entries = set(entries) - keep_entries
    models = {m: s for m, s in index["models"].items() if m not in dropped_entries}
    if "embed" not in tasks:  # an embedder's companions (bert, tokenizer, ...) go with it
        models = {m: s for m, s in models.items() if m in keep_entries}
    copy = linked_copy(repository, work / "-".join(sorted(tasks)))
    index["models"] = models
    index["ensemble_requires"] = {e: s for e, s in index.get("ensemble_requires", {}).items() if e in models}
    replace_file(copy / REPOSITORY_INDEX, json.dumps(index, indent=2).encode())
    return copy


def _first_answers(grpc_url: str, entries: dict[str, str]) -> dict[str, float]:
    """Milliseconds of each entry point's first request after ready."""
    client = grpcclient.InferenceServerClient(grpc_url)
    out = {}
    try:
        for model, task in entries.items():
            start = time.perf_counter()
            if task == "embed":
                text = grpcclient.InferInput("TEXT", [len(TEXTS), 1], "BYTES")
                text.set_data_from_numpy(np.array([[t.encode()] for t in TEXTS], dtype=np.object_))
                client.infer(model, [text])
            else:
                q = grpcclient.InferInput("QUERY", [1, 1], "BYTES")
                q.set_data_from_numpy(np.array([[b"what does the fox jump over"]], dtype=np.object_))
                d = grpcclient.InferInput("DOCUMENTS", [1, len(TEXTS)], "BYTES")
                d.set_data_from_numpy(np.array([[t.encode() for t in TEXTS]], dtype=np.object_))
                client.infer(model, [q, d])
            out[model] = (time.perf_counter() - start) * 1e3
    finally:
        client.close()
    return out


def measure(repository: Path, log_path: Path) -> dict:
    entries = entry_points(json.loads((repository / REPOSITORY_INDEX).read_text()))
    server = processes.start(repository, log_path)
    try:
        ready_s = server.wait_ready(timeout_s=300)
        first = _first_answers(server.grpc_url, entries)
        pids = server.processes()
        rss = sum(processes.rss_bytes(p) for p in pids)
        return {"ready_s": ready_s, "rss_mib": rss / MIB, "processes": len(pids), "first_answer_ms": first}
    finally:
        processes.stop(server)


def run(repository: Path, repeats: int, out_dir: Path) -> dict:
    results: dict[str, list[dict]] = {"embed": [], "rerank": [], "embed+rerank": []}
    with tempfile.TemporaryDirectory(prefix="bench-several-") as tmp:
        work = Path(tmp)
        repos = {
            "embed": subset(repository, {"embed"}, work),
            "rerank": subset(repository, {"rerank"}, work),
            "embed+rerank": repository,
        }
        for i in range(repeats):  # in turns, so that a drift of the machine falls on every case alike
            for case, repo in repos.items():
                r = measure(repo, work / f"{case}-{i}.log")
                log.info(
                    "%s #%d: ready %.2f s, RSS %.0f MiB, first answers %s",
                    case,
                    i,
                    r["ready_s"],
                    r["rss_mib"],
                    r["first_answer_ms"],
                )
                results[case].append(r)
    summary = {
        case: {
            "ready_s_median": statistics.median(r["ready_s"] for r in runs),
            "ready_s": [round(r["ready_s"], 3) for r in runs],
            "rss_mib_median": statistics.median(r["rss_mib"] for r in runs),
            "rss_mib": [round(r["rss_mib"], 1) for r in runs],
            "processes": runs[0]["processes"],
            "first_answer_ms": runs[-1]["first_answer_ms"],
        }
        for case, runs in results.items()
    }
    report = {"cpu": cpu_model(), "repository": str(repository), "repeats": repeats, "cases": summary}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "several-models-cpu.json").write_text(json.dumps(report, indent=2) + "\n")
    (out_dir / "several-models-cpu.md").write_text(table(report) + "\n")
    return report


def table(report: dict) -> str:
    lines = [
        f"CPU: {report['cpu']}; {report['repeats']} starts each, medians",
        "",
        "| served | ready s | RSS MiB (tritonserver + children) |",
        "|---|---|---|",
    ]
    for case, s in report["cases"].items():
        lines.append(f"| {case} | {s['ready_s_median']:.2f} | {s['rss_mib_median']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser(prog="python -m bench.several_models", description=__doc__.split("\n\n")[0])
    p.add_argument("--repository", type=Path, required=True, help="a repository of an embedder and a reranker")
    p.add_argument("--repeats", type=int, default=3, help="starts per case (default 3)")
    p.add_argument("--out", type=Path, default=Path("reports"), help="where the report goes (default reports/)")
    a = p.parse_args(argv)
    entries = entry_points(json.loads((a.repository / REPOSITORY_INDEX).read_text()))
    if sorted(entries.values()) != ["embed", "rerank"]:
        log.error("%s serves %s: this benchmark needs one embedder and one reranker", a.repository, entries)
        return 2
    sys.stdout.write(table(run(a.repository, a.repeats, a.out)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
