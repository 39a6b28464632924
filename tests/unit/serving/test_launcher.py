"""The launcher's choices on a fake repository: which models load, which are left, which fail verification."""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from common.cpus import usable_cpus
from export.repository import file_hashes
from serving.contract import manifest as server_manifest
from serving.contract.hardware import cpu_model
from serving.contract.manifest import entry_points
from serving.launcher import server, stubs
from serving.launcher.config import parse_args
from serving.launcher.server import LaunchError, command, read_index, select_models


def _model(repo: Path, name: str, files: dict[str, bytes], **manifest: object) -> None:
    d = repo / name
    for rel, data in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)
    (d / "manifest.json").write_text(json.dumps({"target": "cpu", **manifest, "files": file_hashes(d)}))


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    _model(r, "tokenizer", {"config.pbtxt": b"t", "1/model.py": b"pass"})
    _model(r, "bert", {"config.pbtxt": b"b", "1/model.py": b"pass", "1/model.aoti.pt2": b"weights"})
    _model(r, "bert_fp32", {"config.pbtxt": b"b", "1/model.py": b"pass"})
    _model(r, "embed", {"config.pbtxt": b"e"})
    _model(r, "bert_torchscript", {"config.pbtxt": b"s", "1/model.pt": b"ts"})
    backends = {"tokenizer": "python", "bert": "python", "bert_fp32": "python", "embed": "ensemble"}
    index = {"models": {**{k: {"backend": v} for k, v in backends.items()}, "bert_torchscript": {"backend": "pytorch"}}}
    index["ensemble_requires"] = {"embed": ["tokenizer", "bert"]}
    (r / "repository.json").write_text(json.dumps(index))
    return r


@pytest.fixture()
def backends(tmp_path: Path) -> Path:
    (tmp_path / "backends" / "python").mkdir(parents=True)
    return tmp_path / "backends"


def test_loads_models_whose_backend_exists(repo, backends, caplog):
    assert select_models(repo, read_index(repo), backends) == ["tokenizer", "bert", "bert_fp32", "embed"]
    assert "not loading bert_torchscript: this server has no 'pytorch' backend" in caplog.text


def test_tampered_file_keeps_its_model_out_and_says_which(repo, backends, caplog):
    (repo / "bert" / "1" / "model.aoti.pt2").write_bytes(b"weightz")
    assert select_models(repo, read_index(repo), backends) == ["tokenizer", "bert_fp32", "embed"]
    assert "not loading bert:" in caplog.text and "model.aoti.pt2" in caplog.text
    assert "embed needs ['bert']" in caplog.text


def test_every_entry_point_of_a_repository_of_several_stays_listed_when_it_fails_verification(tmp_path, backends):
    """A tampered reranker beside an embedder: listed, it keeps the server not ready (--strict-readiness) rather
    than ready without it; a companion that fails is left out (its entry point then fails to load)."""
    r = tmp_path / "several"
    for name in ("embed", "reranker", "small_tokenizer"):
        _model(r, name, {"config.pbtxt": name.encode(), "1/model.aoti.pt2": b"weights"})
    tasks = {"embed": "embed", "reranker": "rerank"}
    models = {
        m: {"backend": "python", **({"task": tasks[m]} if m in tasks else {})} for m in [*tasks, "small_tokenizer"]
    }
    (r / "repository.json").write_text(json.dumps({"models": models}))
    assert entry_points(read_index(r)) == {"embed": "embed", "reranker": "rerank"}
    for name in ("reranker", "small_tokenizer"):
        (r / name / "1" / "model.aoti.pt2").write_bytes(b"weightz")
    assert select_models(r, read_index(r), backends) == ["embed", "reranker"]


def _native_repo(root: Path, threads: dict[str, str]) -> Path:
    for name, count in threads.items():
        config = f'name: "{name}"\nbackend: "bertserve"\nparameters {{ key: "threads" value {{ string_value: "{count}" }} }}\n'
        _model(root, name, {"config.pbtxt": config.encode()})
    models = {m: {"backend": "bertserve", "task": "embed"} for m in threads}
    (root / "repository.json").write_text(json.dumps({"models": models}))
    return root


def test_native_models_of_different_thread_counts_are_warned_of(tmp_path, caplog):
    backends = tmp_path / "backends"
    (backends / "bertserve").mkdir(parents=True)
    usable = usable_cpus()
    same = _native_repo(tmp_path / "same", {"embed": "0", "rerank": str(usable)})
    assert select_models(same, read_index(same), backends) == ["embed", "rerank"]
    assert "different intra-op thread counts" not in caplog.text
    mixed = _native_repo(tmp_path / "mixed", {"embed": "0", "rerank": str(usable + 1)})
    assert select_models(mixed, read_index(mixed), backends) == ["embed", "rerank"]
    assert f"different intra-op thread counts ({usable}: embed; {usable + 1}: rerank)" in caplog.text


def test_an_index_without_tasks_has_embed_as_its_entry_point(repo):
    assert entry_points(read_index(repo)) == {"embed": "embed"}


def test_missing_file_is_named(repo, backends, caplog):
    (repo / "tokenizer" / "1" / "model.py").unlink()
    assert "tokenizer" not in select_models(repo, read_index(repo), backends)
    assert "model.py is missing" in caplog.text


@pytest.mark.parametrize("rel", ["../tokenizer/1/model.py", "1/../../bert/1/model.aoti.pt2", "/etc/hostname"])
def test_a_manifest_path_outside_the_model_keeps_it_out(repo, backends, caplog, rel):
    """Files that exist and match their sha256, named by a path that leaves the model's directory."""
    manifest_path = repo / "bert_fp32" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    target = (repo / "bert_fp32" / rel).resolve()
    manifest["files"][rel] = {"bytes": target.stat().st_size, "sha256": server_manifest.sha256(target)}
    manifest_path.write_text(json.dumps(manifest))
    assert "bert_fp32" not in select_models(repo, read_index(repo), backends)
    assert f"names {rel!r}; a file must be a relative path inside the model's directory" in caplog.text


def test_refuses_a_missing_or_unexported_repository(tmp_path):
    with pytest.raises(LaunchError, match="does not exist"):
        read_index(tmp_path / "nope")
    with pytest.raises(LaunchError, match="was not exported"):
        read_index(tmp_path)


def test_command_binds_loopback_and_enables_summaries(repo, backends):
    from serving.launcher.server import Server

    cfg = parse_args(["--repository", str(repo), "--grpc-port", "9001"])
    cmd = command(cfg, Server(Path("/bin/tritonserver"), backends, {}), ["bert"])
    assert "--grpc-address=127.0.0.1" in cmd and "--http-address=127.0.0.1" in cmd and "--grpc-port=9001" in cmd
    assert "--metrics-config=summary_latencies=true" in cmd and "--load-model=bert" in cmd
    assert "--model-control-mode=explicit" in cmd


def test_the_frontends_keep_tritonservers_sizes_unless_configured(repo):
    assert server.frontends(parse_args(["--repository", str(repo)])) == []
    cfg = parse_args(["--repository", str(repo), "--http-threads", "4", "--grpc-allocation-pool", "64"])
    assert server.frontends(cfg) == ["--http-thread-count=4", "--grpc-infer-allocation-pool-size=64"]


def test_negative_frontend_sizes_are_refused(repo):
    with pytest.raises(SystemExit):
        parse_args(["--repository", str(repo), "--http-threads", "-1"])


@pytest.mark.parametrize(("target", "parallel"), [("cpu", "false"), ("cuda", "true"), (None, "false")])
def test_the_tokenizer_runs_in_parallel_only_beside_a_cuda_bert(repo, monkeypatch, target, parallel):
    from serving.launcher.server import locate

    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    index = json.loads((repo / "repository.json").read_text())
    if target:
        index["target"] = target
    (repo / "repository.json").write_text(json.dumps(index))
    cfg = parse_args(["--repository", str(repo), "--tritonserver", "/bin/true"])
    assert locate(cfg, read_index(repo)).env["TOKENIZERS_PARALLELISM"] == parallel
    assert locate(cfg, read_index(repo)).env["GOMP_SPINCOUNT"] == "10000"
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "maybe")  # the environment's own setting wins
    assert locate(cfg, read_index(repo)).env["TOKENIZERS_PARALLELISM"] == "maybe"


def test_a_package_tuned_on_another_processor_loads_with_a_warning(repo, backends, caplog):
    files = {"config.pbtxt": b"b", "1/model.py": b"pass"}
    _model(repo, "bert_fp32", files, autotune={"ran": True, "tuned_for": "Some Other CPU 9000"})
    assert "bert_fp32" in select_models(repo, read_index(repo), backends)
    assert f"bert_fp32 was autotuned for Some Other CPU 9000, not for this machine's {cpu_model()}" in caplog.text
    caplog.clear()
    _model(repo, "bert_fp32", files, autotune={"ran": True, "tuned_for": cpu_model()})
    assert "bert_fp32" in select_models(repo, read_index(repo), backends)
    assert "autotuned" not in caplog.text


def test_a_cpu_repository_asks_tritonserver_for_no_gpu_metrics_or_pinned_pool(backends):
    from serving.launcher.server import Server

    cfg = parse_args(["--repository", "repo"])
    server = Server(Path("/bin/tritonserver"), backends, {})
    cpu = command(cfg, server, ["bert"], target="cpu")
    assert "--allow-gpu-metrics=false" in cpu and "--pinned-memory-pool-byte-size=0" in cpu
    cuda = command(cfg, server, ["bert"], target="cuda")
    assert not any(a.startswith(("--allow-gpu-metrics", "--pinned-memory-pool")) for a in cuda)


def test_remove_regions_removes_only_stub_regions():
    region = Path("/dev/shm") / f"triton_python_backend_shm_region_test-{os.getpid()}"
    other = Path("/dev/shm") / f"bertserve-test-{os.getpid()}"
    region.write_bytes(b"x")
    other.write_bytes(b"x")
    try:
        stubs.remove_regions({region.name, other.name, "../etc/passwd", "triton_python_backend_shm_region_absent"})
        assert not region.exists() and other.exists()
    finally:
        region.unlink(missing_ok=True)
        other.unlink(missing_ok=True)


def test_the_admin_key_set_in_the_environment_is_not_passed_to_tritonserver(repo, monkeypatch):
    """tritonserver hands its environment to every backend stub: model code must not find the key there."""
    from serving.launcher.server import locate

    monkeypatch.setenv("BERTSERVE_SERVE_ADMIN_KEY", "operator-key")
    cfg = parse_args(["--repository", str(repo), "--tritonserver", "/bin/true"])
    assert cfg.admin_key == "operator-key"
    assert "operator-key" not in locate(cfg, read_index(repo)).env.values()


def test_shared_memory_is_restricted_with_model_control(repo, backends):
    from serving.launcher.server import Server

    cfg = parse_args(["--repository", str(repo)])
    cmd = command(cfg, Server(Path("/bin/tritonserver"), backends, {}), ["bert"], "k")
    for flag in ("--http-restricted-api=", "--grpc-restricted-protocol="):
        (spec,) = [c.removeprefix(flag) for c in cmd if c.startswith(flag)]
        groups = spec.split(":")[0].split(",")
        assert {"model-repository", "shared-memory", "trace", "logging"} <= set(groups), spec


def test_private_tmpdir_is_removed_after_use_and_abandoned_ones_at_the_next_start(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    old = time.time() - 2 * server.SCRATCH_GRACE_S
    abandoned, running, starting = (tmp_path / f"{server.SCRATCH_PREFIX}{n}" for n in ("a", "b", "c"))
    other = tmp_path / "bertserve-backends-0"  # the bundled backends' directory, beside it in the same TMPDIR
    for d in (abandoned, running, starting, other):
        (d / "aotinductor_x").mkdir(parents=True)
    for d in (abandoned, running, other):
        os.utime(d, (old, old))
    with (running / ".lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        env: dict[str, str] = {}
        with server.private_tmpdir(env) as scratch:
            assert env["TMPDIR"] == str(scratch) and scratch.is_dir() and scratch.parent == tmp_path
        assert not scratch.exists()
    assert not abandoned.exists(), "a directory no launcher holds, older than the grace, is removed"
    assert running.is_dir() and starting.is_dir(), "a held or a new directory is kept"
    assert other.is_dir(), "only the launcher's scratch directories are candidates"
