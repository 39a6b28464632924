"""The compile report: what TorchDynamo saw, what each artifact path produced, how accurate it is."""

from __future__ import annotations

from typing import Any


def table(report: dict[str, Any]) -> str:
    d = report["dynamo"]
    lines = [
        f"TorchDynamo on the eager model: {d['graphs']} graph(s), {d['graph_breaks']} graph break(s)",
        "",
        f"{'model':<12} {'artifact':<17} {'build s':>8} {'MB':>7} {'kernels':>8} {'min cos':>9} {'spearman':>9}",
    ]
    for a in report["artifacts"]:
        kernels = a.get("generated_kernels", "")
        lines.append(
            f"{a['model']:<12} {a['path']:<17} {a['seconds']:>8.1f} {a['bytes'] / 1e6:>7.1f} {kernels!s:>8} "
            f"{a['min_cosine']:>9.5f} {a['spearman']:>9.4f}"
        )
    for n in report["not_applicable"]:
        lines.append(f"{n['model']:<12} {n['path']:<17} not built: {n['reason']}")
    lines.append("")
    for model, tuning in report.get("autotune", {}).items():
        if tuning["ran"]:
            lines.append(f"{model}: autotuned for {tuning['tuned_for']} in {tuning['seconds']:.0f} s")
            for shapes, c in tuning["gemm_classes"].items():
                library = f", library {c['library_ms']:.4f} ms" if c["library_ms"] is not None else ""
                lines.append(f"  {c['gemms']} x {shapes}: {c['winner']} {c['winner_ms']:.4f} ms{library}")
    lines.append(f"{'model':<12} {'retrieval on':<17} {'texts':>6} {'nn agree':>9} {'recall@10':>9} {'min cos':>9}")
    for model, r in report.get("retrieval", {}).items():
        verdict = "passes" if r.get("passed") else "FAILS: may not serve bert"
        lines.append(
            f"{model:<12} {r['artifact']:<17} {r['texts']:>6} {r['nn_agreement']:>9.4f} {r['recall_at_10']:>9.4f} "
            f"{r['min_cosine']:>9.5f} {verdict}"
        )
    for model, ms in report["latency_ms"].items():
        lines.append(f"{model}: {ms:.2f} ms, batch 1, median over 16 and 64 tokens ({report['runtime'][model]})")
    return "\n".join(lines)
