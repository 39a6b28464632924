"""One attention-projection-shaped Linear (384 -> 384) as torchao's int8 Linear (``_int_mm``), as ``Int8Linear``
(oneDNN ``qlinear_pointwise`` over a packed weight) and fp32, each an AOTInductor package (freezing, no autotune),
timed interleaved at M = 16-4096 rows. ``python -m bench.int8_gemm --threads 1``: median µs (p99) per call.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.export import Dim

from export.quantize import Int8Linear, _torchao_int8

log = logging.getLogger(__name__)

ROWS = (16, 128, 1024, 4096)


class _Wrap(nn.Module):
    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.m = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.m(x)


def _package(module: nn.Module, path: Path):
    with torch.no_grad():
        ep = torch.export.export(module.eval(), (torch.randn(64, 384),), dynamic_shapes=({0: Dim("m", max=8192)},))
        torch._inductor.aoti_compile_and_package(ep, package_path=str(path), inductor_configs={"freezing": True})
    return torch._inductor.aoti_load_package(str(path))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.int8_gemm", description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    linear = nn.Linear(384, 384)
    torchao = _Wrap(nn.Linear(384, 384))
    torchao.m.load_state_dict(linear.state_dict())
    _torchao_int8(torchao, {"m"}, asymmetric=frozenset({"m"}))
    modules = {"torchao int8 (_int_mm)": torchao, "Int8Linear (oneDNN qlinear)": _Wrap(Int8Linear(linear))}
    modules["fp32 Linear"] = _Wrap(linear)
    with tempfile.TemporaryDirectory() as tmp:
        runs = {name: _package(m, Path(tmp) / f"{i}.pt2") for i, (name, m) in enumerate(modules.items())}
        xs = {m: torch.randn(m, 384) for m in ROWS}
        times: dict[tuple[str, int], list[float]] = {(n, m): [] for n in runs for m in xs}
        with torch.inference_mode():
            for name, run in runs.items():
                err = max(float((run(x) - linear(x)).norm() / linear(x).norm()) for x in xs.values())
                log.info("%s: relative error against fp32 at most %.2e", name, err)
            for r in range(args.rounds):
                order = list(runs.items()) if r % 2 == 0 else list(runs.items())[::-1]
                for name, run in order:
                    for m, x in xs.items():
                        for _ in range(max(3, 2000 // m)):
                            start = time.perf_counter()
                            run(x)
                            times[name, m].append((time.perf_counter() - start) * 1e6)
    lines = [
        f"threads {args.threads}; median µs (p99) per call",
        "| variant | " + " | ".join(f"M={m}" for m in xs) + " |",
    ]
    lines.append("|---|" + "---:|" * len(xs))
    for name in runs:
        cells = []
        for m in xs:
            t = sorted(times[name, m])
            cells.append(f"{statistics.median(t):.0f} ({t[int(0.99 * (len(t) - 1))]:.0f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
