"""Markdown rendering and report rows of the benchmark."""

from __future__ import annotations

from typing import Any

import torch

from bench.report import cell_rows, markdown_report
from bench.table import full_table, markdown, overview
from bench.timing import Cell
from bench.variants import Variant


def _variant(name: str, precision: str) -> Variant:
    return Variant(name, precision, call=lambda a: a, prepare=lambda i, m: (i, m), to_cpu=lambda o: o)


def _cells() -> list[Cell]:
    specs = [("eager fp32", "fp32", 0.010), ("aoti fp32", "fp32", 0.005), ("int8", "int8", 0.0025)]
    cells = []
    for name, precision, seconds in specs:
        for batch in (1, 8):
            cell = Cell(_variant(name, precision), (batch, 16), arg=None, min_cosine=0.995, peak_mib=1.5)
            cell.samples = [seconds * batch] * 5
            cells.append(cell)
    return cells


def test_markdown_right_aligns_numeric_columns() -> None:
    text = markdown(["name", "ms"], [("a", 1.5), ("b", None)])
    lines = text.splitlines()
    assert lines[1] == "| --- | ---: |"
    assert lines[2] == "| a | 1.50 |"
    assert lines[3] == "| b | – |"


def test_cell_rows_carry_speedup_over_best_fp32_per_shape() -> None:
    rows = {(r["variant"], r["batch"]): r for r in cell_rows(_cells())}
    assert rows[("aoti fp32", 1)]["speedup"] == 1.0
    assert rows[("eager fp32", 8)]["speedup"] == 0.5
    assert rows[("int8", 8)]["speedup"] == 2.0
    assert rows[("int8", 1)]["throughput"] == 400.0


def test_tables_name_every_variant_and_shape() -> None:
    rows = cell_rows(_cells())
    full = full_table(rows)
    assert full.count("\n") == len(rows) + 1
    assert "0.9950" in full
    over = overview(rows, ["eager fp32", "aoti fp32", "int8", "missing"])
    assert "| b1 s16 | b8 s16 |" in over
    assert "2.50 (2.00×)" in over
    assert "| missing | – | – |" in over


def test_markdown_report_names_machine_and_skips() -> None:
    report: dict[str, Any] = {
        "config": {"device": "cpu"},
        "model": "tiny",
        "machine": {
            "cpu": "Some CPU",
            "cpu_capability": "AVX2",
            "torch_threads": 2,
            "torch": torch.__version__,
            "loadavg": [1.0, 1.0, 1.0],
        },
        "variants": [
            {"name": n, "precision": p, "build_s": 1.0, "resident_mib": 2.0, "note": ""}
            for n, p in (("eager fp32", "fp32"), ("aoti fp32", "fp32"), ("int8", "int8"))
        ],
        "skipped": [{"name": "onnxruntime fp32", "reason": "ImportError: no onnxruntime"}],
        "cells": cell_rows(_cells()),
    }
    text = markdown_report(report)
    assert text.startswith("# bench-cpu")
    assert "Some CPU" in text
    assert "onnxruntime fp32: ImportError" in text


def test_min_cosine_of_identical_outputs_is_one() -> None:
    from bench.timing import min_cosine

    x = torch.nn.functional.normalize(torch.randn(4, 8), dim=1)
    assert abs(min_cosine(x, x) - 1.0) < 1e-6
