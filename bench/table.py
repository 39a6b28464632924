"""Markdown tables of a benchmark report: a median/speed-up overview and the full per-cell table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

FULL_COLUMNS = (
    "variant",
    "batch",
    "seq",
    "median ms",
    "p99 ms",
    "seq/s",
    "× best fp32",
    "min cos",
    "peak MiB",
    "n",
)


def markdown(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table; numbers right-aligned."""
    cells = [[_fmt(v) for v in row] for row in rows]
    numeric = [all(_is_number(row[i]) for row in rows) if rows else False for i in range(len(header))]
    align = ["---:" if n else "---" for n in numeric]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


def _is_number(v: object) -> bool:
    if isinstance(v, str):
        try:
            float(v.replace(",", ""))
        except ValueError:
            return False
        return True
    return isinstance(v, int | float) and not isinstance(v, bool) or v is None


def _fmt(v: object) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v:  # NaN
            return "–"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 100:
            return f"{v:.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
    return str(v)


def _cos(v: float | None) -> str | None:
    """Cosines to four decimals: 0.9996 and 1.0 must not both print as 1.00."""
    return None if v is None else f"{v:.4f}"


def full_table(cells: Sequence[dict[str, Any]]) -> str:
    rows = []
    for c in cells:
        rows.append(
            (
                c["variant"],
                c["batch"],
                c["seq"],
                c["median_ms"],
                c["p99_ms"],
                c["throughput"],
                c.get("speedup"),
                _cos(c.get("min_cosine")),
                c.get("peak_mib"),
                c["n"],
            )
        )
    return markdown(FULL_COLUMNS, rows)


def overview(cells: Sequence[dict[str, Any]], variants: Sequence[str]) -> str:
    """One row per variant, one column per shape: "median ms (speed-up × best fp32)"."""
    shapes = sorted({(c["batch"], c["seq"]) for c in cells}, key=lambda s: (s[1], s[0]))
    by_key = {(c["variant"], c["batch"], c["seq"]): c for c in cells}
    header = ["variant", *(f"b{b} s{s}" for b, s in shapes)]
    rows = []
    for name in variants:
        row: list[object] = [name]
        for b, s in shapes:
            c = by_key.get((name, b, s))
            if c is None:
                row.append("–")
            elif c.get("speedup") is None:
                row.append(_fmt(c["median_ms"]))
            else:
                row.append(f"{_fmt(c['median_ms'])} ({c['speedup']:.2f}×)")
        rows.append(row)
    return markdown(header, rows)


def variants_table(variants: Sequence[dict[str, Any]]) -> str:
    """Build (or load) seconds, memory each variant holds after its warm-up, and its retrieval figures against
    eager fp32 (nearest-neighbour agreement / recall@10 / min cosine; export gates on export.verify.RETRIEVAL_MIN)."""
    rows = [
        (v["name"], v["precision"], v["build_s"], v["resident_mib"], _retrieval(v.get("retrieval")), v.get("note", ""))
        for v in variants
    ]
    return markdown(("variant", "precision", "build s", "holds MiB", "retrieval", "note"), rows)


def _retrieval(r: dict[str, float] | None) -> str:
    return "" if not r else f"{r['nn_agreement']:.4f} / {r['recall_at_10']:.4f} / {r['min_cosine']:.5f}"
