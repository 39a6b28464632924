"""bench.profile on the tiny model's export: a kernel table with rows, a valid Chrome trace, the generated source."""

from __future__ import annotations

import json
from pathlib import Path

from bench import profile


def test_profile_of_the_tiny_export_names_its_kernels_and_keeps_their_source(tiny_repository: Path, tmp_path: Path):
    out = tmp_path / "reports"
    assert profile.main(["--repository", str(tiny_repository), "--batch", "2", "--tokens", "8", "--calls", "3",
                         "--output-dir", str(out)]) == 0  # fmt: skip
    result = json.loads((out / "profile-bert-cpu-2x8.json").read_text())
    names = [k["name"] for k in result["kernels"]]
    # The instrumented copy shows Inductor's generated C++ kernels by name, not only library calls.
    assert any("cpp_fused" in n for n in names), names
    assert result["kernels_per_forward"] >= len({n for n in names if "cpp_fused" in n}) > 0
    # Shares are of the profiled forward; what no recorded kernel accounts for is its own row.
    recorded = sum(k["self_ms_per_forward"] for k in result["kernels"])
    assert result["profiled_ms"] > 0 and result["unrecorded_ms"] >= 0
    assert result["unrecorded_ms"] >= result["profiled_ms"] - recorded - 1e-9
    assert abs(sum(k["share"] for k in result["kernels"]) - recorded / result["profiled_ms"]) < 1e-6
    assert result["served_ms"] > 0 and result["instrumented_ms"] > 0
    trace = json.loads((out / "profile-bert-cpu-2x8.trace.json").read_text())
    assert any("cpp_fused" in e.get("name", "") for e in trace["traceEvents"])
    source = Path(result["source_dir"])
    assert any(f.endswith(".cpp") and "cpp_fused" in (source / f).read_text() for f in result["source_files"])
    table = (out / "profile-bert-cpu-2x8.md").read_text()
    assert table.count("| `") == min(10, len(names))
    assert f"| no recorded kernel | | {result['unrecorded_ms']:.3f} |" in table
