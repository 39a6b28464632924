"""``python -m bench.replicas``: `make serve REPLICAS=2` on one host, each replica on its own CPUs against both
on all of them, one after the other: gRPC latency through nginx at concurrency 4 and 1, while one replica is
killed, and on the survivor alone. Prints one table (ms; p50 / p90 / p99, and the failed calls)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import tritonclient.grpc.aio as grpcaio

from reliability.processes import ROOT, free_port, http_status

TEXT = b"replicated request"


async def _drive(url: str, n: int, concurrency: int, kill: list[int] | None = None) -> tuple[list[float], Counter]:
    """``n`` one-text calls to ``embed``, ``concurrency`` at a time; ``kill``: SIGKILL these pids 0.3 s in."""
    client = grpcaio.InferenceServerClient(url)
    text = grpcaio.InferInput("TEXT", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[TEXT]], dtype=np.object_))
    gate, ms, failed = asyncio.Semaphore(concurrency), [], Counter()

    async def one() -> None:
        async with gate:
            start = time.perf_counter()
            try:
                await client.infer("embed", [text], client_timeout=10)
                ms.append((time.perf_counter() - start) * 1e3)
            except Exception as e:
                failed[str(e).split(":")[0]] += 1

    calls = asyncio.gather(*[one() for _ in range(n)])
    if kill:
        await asyncio.sleep(0.3)
        for pid in kill:
            os.kill(pid, signal.SIGKILL)
    await calls
    await client.close()
    return ms, failed


def _children(pid: int) -> list[int]:
    return [int(p) for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()]


def _run(repository: Path, share: bool, calls: int) -> list[tuple[str, list[float], Counter]]:
    grpc, base = free_port(), 20000 + (os.getpid() % 2000) * 10  # base .. base + 13: the replicas' ports
    cmd = [sys.executable, "-m", "serving.launcher.replicas", "--replicas", "2", "--repository", str(repository),
           "--http-port", str(free_port()), "--grpc-port", str(grpc), "--base-port", str(base),
           "--gateway-port", str(free_port()), "--share-cpus" if share else "--no-share-cpus"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not all(
            http_status(f"http://127.0.0.1:{p}/v2/health/ready", timeout_s=1) == 200 for p in (base, base + 10)
        ):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the replicas did not become ready")
            time.sleep(0.5)
        time.sleep(3)  # nginx starts once both are
        url = f"127.0.0.1:{grpc}"
        rows = [
            ("2 replicas, c=4", *asyncio.run(_drive(url, calls, 4))),
            ("2 replicas, c=1", *asyncio.run(_drive(url, calls, 1))),
        ]
        victim = next(p for p in _children(proc.pid) if "serving" in Path(f"/proc/{p}/cmdline").read_text())
        rows.append(("one killed, c=4", *asyncio.run(_drive(url, calls, 4, kill=_children(victim)))))
        time.sleep(6)  # nginx takes the dead replica out for 5 s at a time
        rows.append(("survivor, c=4", *asyncio.run(_drive(url, calls, 4))))
        return rows
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replicas", description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    parser.add_argument("--calls", type=int, default=200, help="calls per row")
    args = parser.parse_args(argv)
    say(f"CPUs: {len(os.sched_getaffinity(0))}; `embed`, one text a call, gRPC through nginx")
    say(
        "| | own CPUs: p50 / p90 / p99 ms | failed | all CPUs: p50 / p90 / p99 ms | failed |\n| --- | --- | --- | --- | --- |"
    )
    results = {share: _run(args.repository, share, args.calls) for share in (True, False)}
    for (label, own, own_failed), (_, every, every_failed) in zip(results[True], results[False], strict=True):
        cells = [" / ".join(f"{v:.1f}" for v in np.percentile(ms, [50, 90, 99])) if ms else "-" for ms in (own, every)]
        say(f"| {label} | {cells[0]} | {dict(own_failed) or 0} | {cells[1]} | {dict(every_failed) or 0} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
