"""Agreement check against perf_analyzer: same server, model and payload pool, several concurrency levels.

    python -m loadtest.perf_analyzer_compare --url 127.0.0.1:8001 --concurrency 1,4,16

perf_analyzer comes from the manylinux wheel tritonclient==2.41.0 (PyPI's perf-analyzer is a placeholder).
It is fetched once into build/perf_analyzer/ with pip, and the two libraries it needs (libb64.so.0d,
libcudart.so.12) are linked there from the pytriton wheel, whose copies carry hashed names. Both tools get
the same seeded payload pool: perf_analyzer through --input-data JSON, the load tester through its own
sampler with the same seed. Exit 0 when every p50 and p99 agree within the tolerance, 1 otherwise.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from common import options
from common.options import option
from loadtest.config import ENV_PREFIX as LOADTEST_ENV_PREFIX
from loadtest.config import LoadTestConfig
from loadtest.payload import build_pool, perf_analyzer_input_data
from serving.client import DEFAULT_URL

logger = logging.getLogger(__name__)

PROG = "python -m loadtest.perf_analyzer_compare"
ENV_PREFIX = "BERTSERVE_COMPARE_"  # its own: a load test's settings must not change the comparison

WHEEL_SPEC = "tritonclient==2.41.0"
BINARY_IN_WHEEL = "tritonclient-2.41.0.data/data/bin/perf_analyzer"
NEEDED_LIBS = {"libb64.so.0d": "libb64-", "libcudart.so.12": "libcudart-"}
# The CSV's split of the mean latency (µs) into client, network + server frontend, and the called model's server side.
SPLIT_COLUMNS = {
    "Client Send": "client_send",
    "Network+Server Send/Recv": "network_and_frontend",
    "Server Queue": "queue",
    "Server Compute Input": "compute_input",
    "Server Compute Infer": "compute_infer",
    "Server Compute Output": "compute_output",
    "Client Recv": "client_recv",
}


def pytriton_libs() -> Path:
    import pytriton

    libs = Path(pytriton.__file__).resolve().parent.parent / "nvidia_pytriton.libs"
    if not libs.is_dir():
        raise FileNotFoundError(f"{libs} not found; is nvidia-pytriton installed?")
    return libs


def ensure_perf_analyzer(build: Path) -> tuple[Path, Path]:
    """(binary, library dir), fetching the wheel and linking the libraries on first use."""
    home = build / "perf_analyzer"
    binary, libdir = home / "perf_analyzer", home / "lib"
    if not binary.exists():
        home.mkdir(parents=True, exist_ok=True)
        wheels = list(home.glob("tritonclient-2.41.0-*manylinux*.whl"))
        if not wheels:
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--platform",
                "manylinux1_x86_64",
                "--dest",
                str(home),
                WHEEL_SPEC,
            ]
            logger.info("fetching perf_analyzer: %s", " ".join(cmd))
            subprocess.run(cmd, check=True)
            wheels = list(home.glob("tritonclient-2.41.0-*manylinux*.whl"))
        with zipfile.ZipFile(wheels[0]) as wheel:
            binary.write_bytes(wheel.read(BINARY_IN_WHEEL))
        binary.chmod(0o755)
    libdir.mkdir(exist_ok=True)
    source = pytriton_libs()
    for name, prefix in NEEDED_LIBS.items():
        link = libdir / name
        if not link.exists():
            matches = sorted(source.glob(prefix + "*.so*"))
            if not matches:
                raise FileNotFoundError(f"no {prefix}*.so* in {source}")
            link.symlink_to(matches[0])
    return binary, libdir


def run_perf_analyzer(
    binary: Path,
    libdir: Path,
    url: str,
    model: str,
    concurrency: int,
    data: Path,
    out_csv: Path,
    window_ms: int,
    stability: float,
    max_trials: int = 6,
    batch: int = 1,
    protocol: str = "grpc",
) -> dict[str, float]:
    """One perf_analyzer step; ``batch`` sequences per request (its throughput counts sequences); ``protocol``:
    grpc or http (KServe over HTTP, binary tensors)."""
    env = dict(os.environ, LD_LIBRARY_PATH=f"{libdir}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    cmd = [str(binary), "-m", model, "-u", url, "-i", protocol, "-b", str(batch)]
    cmd += ["--concurrency-range", f"{concurrency}:{concurrency}", "--input-data", str(data)]
    cmd += ["--measurement-interval", str(window_ms), "--stability-percentage", f"{stability:g}"]
    cmd += ["--max-trials", str(max_trials), "-f", str(out_csv)]
    logger.info("perf_analyzer: %s", " ".join(cmd))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-2:])
        raise RuntimeError(f"perf_analyzer exited {done.returncode} at concurrency {concurrency}: {tail}")
    with out_csv.open(newline="") as f:
        row = next(csv.DictReader(f))
    return {
        "throughput": float(row["Inferences/Second"]),
        "p50_ms": float(row["p50 latency"]) / 1e3,
        "p99_ms": float(row["p99 latency"]) / 1e3,
        "split_us": {key: float(row[col]) for col, key in SPLIT_COLUMNS.items() if row.get(col, "") != ""},
    }


def run_loadtest(
    url: str, model: str, concurrency: int, duration_s: float, out_dir: Path, seed: int, extra: Sequence[str] = ()
) -> dict[str, float]:
    cmd = [
        sys.executable,
        "-m",
        "loadtest",
        "--url",
        url,
        "--model",
        model,
        "--concurrency",
        str(concurrency),
        "--duration-s",
        str(duration_s),
        "--warmup-s",
        "2",
        "--seed",
        str(seed),
        "--metrics-port",
        "0",
        "--no-plot",
        "--no-progress",
        "--output-dir",
        str(out_dir),
        "--budget-ms",
        "1e9",
        *extra,
    ]
    logger.info("loadtest: %s", " ".join(cmd))
    # The load tester gets exactly these settings, whatever BERTSERVE_LOADTEST_* the caller has set.
    env = {k: v for k, v in os.environ.items() if not k.startswith(LOADTEST_ENV_PREFIX)}
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    doc = json.loads((out_dir / f"{model}_closed.json").read_text())
    step = doc["steps"][0]
    if step["failed"]:
        raise RuntimeError(f"loadtest had {step['failed']} failed requests at concurrency {concurrency}")
    lat = step["latency"]
    return {"throughput": step["throughput_rps"], "p50_ms": lat["p50_ms"], "p99_ms": lat["p99_ms"]}


def compare(rows: list[tuple[int, dict[str, float], dict[str, float]]], tolerance: float) -> tuple[list[str], bool]:
    """Table lines and whether every p50/p99 agrees within `tolerance` (relative to perf_analyzer)."""
    lines = [f"{'conc':>4}  {'metric':>10}  {'perf_analyzer':>13}  {'loadtest':>9}  {'diff':>7}"]
    agree = True
    for conc, pa, ours in rows:
        for key in ("throughput", "p50_ms", "p99_ms"):
            diff = (ours[key] - pa[key]) / pa[key] if pa[key] else float("inf")
            judged = key != "throughput"
            flag = "" if not judged or abs(diff) <= tolerance else "  <-- outside tolerance"
            agree &= not flag
            lines.append(f"{conc:>4}  {key:>10}  {pa[key]:>13.2f}  {ours[key]:>9.2f}  {diff:>+7.1%}{flag}")
    return lines, agree


@dataclass(frozen=True)
class CompareConfig:
    url: str = option(DEFAULT_URL, "server address host:port (gRPC)")
    model: str = option("embed", "the model both tools call")
    concurrency: tuple[int, ...] = option((1, 4, 16), "concurrency levels, comma separated")
    duration_s: float = option(10.0, "the load tester's window per level")
    window_ms: int = option(5000, "perf_analyzer's measurement interval")
    stability: float = option(20.0, "perf_analyzer's --stability-percentage")
    tolerance: float = option(0.10, "largest relative difference of p50 and p99 that still agrees")
    seed: int = option(0, "the payload pool's seed (both tools get the same pool)")
    build: Path = option(Path("build"), "where perf_analyzer is fetched and the work files go")


def parse_args(argv: Sequence[str] | None = None) -> CompareConfig:
    """Exits with argparse's message (status 2) on an invalid option or variable."""
    return options.parse(CompareConfig, argv, prefix=ENV_PREFIX, prog=PROG, description=__doc__.split("\n")[0])


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)

    work = args.build / "perf_analyzer_compare"
    work.mkdir(parents=True, exist_ok=True)
    binary, libdir = ensure_perf_analyzer(args.build)
    pool = build_pool(LoadTestConfig(seed=args.seed), "text" if args.model == "embed" else "tokens")
    data = work / "input_data.json"
    data.write_text(json.dumps(perf_analyzer_input_data(pool)), encoding="utf-8")

    rows = []
    for conc in args.concurrency:
        csv_path = work / f"pa_c{conc}.csv"
        pa = run_perf_analyzer(
            binary, libdir, args.url, args.model, conc, data, csv_path, args.window_ms, args.stability
        )
        ours = run_loadtest(args.url, args.model, conc, args.duration_s, work / f"lt_c{conc}", args.seed)
        rows.append((conc, pa, ours))
    lines, agree = compare(rows, args.tolerance)
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.write(("agree" if agree else "DISAGREE") + f" within {args.tolerance:.0%} on p50 and p99\n")
    (work / "comparison.json").write_text(
        json.dumps([{"concurrency": c, "perf_analyzer": p, "loadtest": o} for c, p, o in rows], indent=2)
    )
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
