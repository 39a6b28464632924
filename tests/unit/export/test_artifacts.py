"""Where a package's Linears run on the CPU (artifacts.fp32_configs): oneDNN over packed weights, or ATen."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from export import artifacts as art
from serving.contract.artifacts import AOTI, load_module
from tests.unit.export.tiny_bert import tiny_encoder, token_batch

AVX2 = frozenset({"avx", "avx2", "fma"})


def test_only_a_cpu_without_avx512_leaves_the_weights_unpacked(monkeypatch) -> None:
    monkeypatch.setattr(art, "cpu_flags", lambda: AVX2 | {"avx512f"})
    assert art.fp32_configs("cpu") == {}
    monkeypatch.setattr(art, "cpu_flags", lambda: AVX2)
    assert art.fp32_configs("cuda") == {}
    assert art.fp32_configs("cpu") == {"cpp.weight_prepack": False}
    assert art.fp32_configs("cpu", tuned=True) == {}  # tuning times its templates against the packed Linear


def test_an_unpacked_fp32_package_runs_atens_addmm_and_matches_eager(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(art, "cpu_flags", lambda: AVX2)
    encoder = tiny_encoder()
    package = tmp_path / "fp32.aoti.pt2"
    art.compile_aoti(art.export_program(encoder, "cpu", 4, 32), package, art.fp32_configs("cpu"))
    source = package.read_bytes().decode("latin-1")
    assert "aoti_torch_cpu_addmm_out" in source and "linear_pointwise" not in source
    inputs = token_batch(3, 3, 20)
    with torch.inference_mode():
        torch.testing.assert_close(load_module(AOTI, package, "cpu")(*inputs), encoder(*inputs), atol=1e-5, rtol=0)


# In a fresh process: an unpacked fp32 package, one of int8 Linears, and the fp32 one again.
AFTER_AN_UNPACKED_PACKAGE = """
import sys
from pathlib import Path
from torch import nn
from export import artifacts as art, quantize
from tests.unit.export.tiny_bert import tiny_encoder

art.cpu_flags = lambda: frozenset({"avx", "avx2", "fma"})
out, encoder = Path(sys.argv[1]), tiny_encoder()
fp32 = art.export_program(encoder, "cpu", 4, 32)
art.compile_aoti(fp32, out / "fp32.aoti.pt2", art.fp32_configs("cpu"))
for name, child in [(n, m) for n, m in encoder.named_modules() if isinstance(m, nn.Linear)]:
    quantize.replace_submodule(encoder, name, quantize.Int8Linear(child))
art.compile_aoti(art.export_program(encoder, "cpu", 4, 32), out / "int8.aoti.pt2")
art.compile_aoti(fp32, out / "fp32-after.aoti.pt2", art.fp32_configs("cpu"))
"""


def test_a_package_packs_whatever_the_process_compiled_before(tmp_path) -> None:
    """Inductor registers its packing patterns at a process's first freezing compile: an unpacked package first
    must not leave the int8 one after it without oneDNN's int8 Linear, nor the int8 one pack an fp32 package after
    it."""
    root = Path(__file__).resolve().parents[3]
    subprocess.run([sys.executable, "-c", AFTER_AN_UNPACKED_PACKAGE, str(tmp_path)], cwd=root, check=True)
    fp32, int8, fp32_after = (tmp_path / f"{p}.aoti.pt2" for p in ("fp32", "int8", "fp32-after"))
    for package in (fp32, fp32_after):
        source = package.read_bytes().decode("latin-1")
        assert "aoti_torch_cpu_addmm_out" in source and "linear_pointwise" not in source
    source = int8.read_bytes().decode("latin-1")
    assert "qlinear_pointwise" in source and "aoti_torch_cpu__int_mm_out" not in source


def test_only_a_thread_count_other_than_the_cpu_count_asks_for_dynamic_teams(monkeypatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: torch.get_num_threads())
    assert art.callers_teams() == {}
    monkeypatch.setattr("os.cpu_count", lambda: torch.get_num_threads() + 1)
    assert art.callers_teams() == {"cpp.dynamic_threads": True}


def test_a_package_runs_its_parallel_regions_on_the_callers_team(monkeypatch, tmp_path) -> None:
    """Compiled where torch's thread count is not the CPU count (a host with SMT, a container's CPU set), Inductor
    would fix each parallel region's team at that count, and a serving instance's ``--threads`` would not hold."""
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        package = tmp_path / "fp32.aoti.pt2"
        art.compile_aoti(art.export_program(tiny_encoder(), "cpu", 32, 64), package)
    finally:
        torch.set_num_threads(threads)
    teams = art.omp_teams(package)
    assert teams["the caller's"] > 0 and set(teams) == {"the caller's"}, teams
