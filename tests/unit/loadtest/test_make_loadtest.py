"""`make loadtest` passes the load tester's verdict on: its own exit code, said in words, not make's bare 2."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_make_loadtest_names_the_load_testers_exit_code_when_it_cannot_run():
    args = "--url 127.0.0.1:9 --concurrency 1 --ready-timeout-s 0.5"  # nothing listens on port 9
    proc = subprocess.run(
        ["make", "-s", "--no-print-directory", "loadtest", f"ARGS={args}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "could not run" in proc.stdout + proc.stderr
    assert "python -m loadtest exited 2 (1: SLO breached, 2: could not run)" in proc.stderr
