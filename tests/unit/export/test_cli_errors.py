"""Bad input to ``python -m export``: a clear message, exit 1, and nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "export", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.fixture()
def not_bert(tmp_path: Path) -> Path:
    d = tmp_path / "gpt"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    return d


def test_bad_input_exits_1_with_a_message_and_writes_nothing(tmp_path, not_bert, tiny_checkpoint):
    out = tmp_path / "repo"
    cases = [
        (["--model", str(tmp_path / "nowhere")], "does not exist"),
        (["--model", str(not_bert)], "'gpt2' checkpoint, not 'bert'"),
        (["--precision", "fp4"], "unknown precision 'fp4'"),
        (["--precision", "fp16"], "fp16 needs --target cuda"),
        (["--model", str(tiny_checkpoint), "--max-seq", "100"], "above the checkpoint's position limit 64"),
    ]
    for args, message in cases:
        r = _export(*args, "--output", str(out))
        assert r.returncode == 1, (args, r.stderr[-2000:])
        assert message in r.stderr, (args, r.stderr[-2000:])
        assert not out.exists()
    assert list(tmp_path.glob(".repo.*")) == []


def test_unwritable_output_directory(tmp_path, tiny_checkpoint):
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a directory")
    r = _export("--model", str(tiny_checkpoint), "--precision", "fp32", "--output", str(blocker / "repo"))
    assert r.returncode == 1
    assert "OutputDirError" in r.stderr and str(blocker) in r.stderr
