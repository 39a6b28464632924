"""``python -m reliability soak``: start the server on loopback, measure capacity, hold a fraction of it open loop
for the given minutes, write the per-window figures and the verdict to a JSON file.
``python -m reliability overload``: unloaded p99, capacity, then 3x capacity open loop (scenarios.overload): how
accepted requests fare and how fast the excess is refused, with the repository's deadline or another."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import signal
import sys
from pathlib import Path

from export.model_configs import QueuePolicy
from reliability import processes, scenarios
from reliability.copies import set_native_parameter, shedding_copy

log = logging.getLogger("reliability")

# The soak's pass conditions (issue: zero errors, p99 drift <= 20 %, memory growth < 5 %, no fd growth).
MAX_P99_DRIFT = 0.20
MAX_RSS_GROWTH = 0.05


def verdict(result: dict) -> dict[str, bool]:
    return {
        "zero_errors": result["errors"] == 0,
        "p99_stable": abs(result["p99_drift"]) <= MAX_P99_DRIFT,
        "memory_flat": result["rss_growth_after_warmup"] < MAX_RSS_GROWTH,
        "fds_flat": result["fd_growth_after_warmup"] <= 0,
    }


async def _soak(server: processes.ServerProcess, args: argparse.Namespace) -> dict:
    # Closed-loop capacity swings by a quarter between runs on shared cores: the median of three.
    cap = sorted([await scenarios.capacity(server) for _ in range(3)])[1]
    rate = args.load * cap
    log.info("capacity %.1f req/s; soaking at %.1f req/s for %.1f min", cap, rate, args.minutes)
    result = await scenarios.soak(server, rate, args.minutes * 60, window_s=args.window_s, warmup_s=args.warmup_s)
    return {"capacity_per_s": round(cap, 1), "load": args.load, **result}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m reliability", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("soak", help="hold a fraction of capacity for N minutes; exit 1 if a pass condition fails")
    s.add_argument("--minutes", type=float, default=30.0)
    s.add_argument("--load", type=float, default=0.7, help="fraction of the measured capacity to send (open loop)")
    s.add_argument("--window-s", type=float, default=60.0)
    s.add_argument("--warmup-s", type=float, default=60.0, help="windows before this are left out of growth figures")
    o = sub.add_parser("overload", help="3x capacity open loop: accepted p99 against unloaded, refusal times")
    o.add_argument("--factor", type=float, default=3.0, help="the overload as a multiple of the measured capacity")
    o.add_argument("--seconds", type=float, default=8.0)
    for cmd in (s, o):
        cmd.add_argument("--repository", type=Path, default=Path("model_repository"), help="an exported repository")
        cmd.add_argument(
            "--deadline-us", type=int, default=None,
            help="serve with this default deadline (the native models; Triton's queue timeout for the Python "
            "encoder) instead of the exported one",
        )  # fmt: skip
        cmd.add_argument(
            "--standing-queue-us", type=int, default=None,
            help="serve the native models with this standing-queue target (backend/src/work_queue.h; 0: off) "
            "instead of the exported one",
        )  # fmt: skip
        cmd.add_argument(
            "--server-cpus", type=processes.parse_cpus, default=None,
            help="run the server on these CPUs (taskset's list, e.g. 0,1) and the load on the others, so that the "
            "client's own CPU time does not slow the server it measures",
        )  # fmt: skip
        cmd.add_argument("--out", type=Path, default=Path(f"reports/{cmd.prog.split()[-1]}.json"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    if not (args.repository / "repository.json").is_file():
        sys.stderr.write(f"error: {args.repository} is not an exported repository (run `make export`)\n")
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so that the server started here is stopped
    work = args.out.parent / f"{args.command}-work"
    shutil.rmtree(work, ignore_errors=True)
    policy = None if args.deadline_us is None else QueuePolicy.for_batch(32, timeout_us=args.deadline_us)
    repo = shedding_copy(args.repository, work / "repo", policy)  # as exported, unless --deadline-us
    if args.standing_queue_us is not None:
        set_native_parameter(repo, "standing_queue_us", str(args.standing_queue_us))
    processes.load_beside(args.server_cpus)
    with processes.running(repo, work / "server.log", cpus=args.server_cpus) as server:
        if args.command == "overload":
            result = asyncio.run(scenarios.overload(server, factor=args.factor, seconds=args.seconds))
        else:
            result = asyncio.run(_soak(server, args))
            result["verdict"] = verdict(result)
    result["deadline_us"] = args.deadline_us or "exported"
    result["standing_queue_us"] = "exported" if args.standing_queue_us is None else args.standing_queue_us
    result["server_cpus"] = sorted(args.server_cpus) if args.server_cpus else "shared with the load"
    args.out.write_text(json.dumps(result, indent=2))
    summary = {k: v for k, v in result.items() if k != "windows"}
    sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    return 0 if all(result.get("verdict", {}).values()) else 1


if __name__ == "__main__":
    sys.exit(main())
