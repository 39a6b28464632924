"""Start the real tritonserver on an exported repository: pick the backend stub, verify, load, drain on exit."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import json
import logging
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from common.cpus import usable_cpus
from serving.contract import hardware
from serving.contract.manifest import REPOSITORY_INDEX, VerificationError, entry_points, read, verify
from serving.gateway import process as gateway_process
from serving.launcher import native
from serving.launcher.admin import STOP_GRACE_S, Admin, drain_then_stop
from serving.launcher.config import ENV_PREFIX, RESTRICTED, ServeConfig
from serving.launcher.stubs import STUB, remove_regions, stubs

PR_SET_PDEATHSIG = 1  # linux/prctl.h
SCRATCH_PREFIX = "bertserve-tmpdir-"  # tritonserver's TMPDIR: private_tmpdir
SCRATCH_GRACE_S = 60
log = logging.getLogger(__name__)

# Backends a model of the repository index needs, by the name Triton gives the backend directory.
ALWAYS_PRESENT = {"ensemble"}


class LaunchError(Exception):
    """The server cannot start (no repository, no tritonserver)."""


@dataclass(frozen=True)
class Server:
    binary: Path
    backend_dir: Path
    env: dict[str, str]


def _bundled() -> Path:
    import pytriton

    return Path(pytriton.__file__).resolve().parent / "tritonserver"


def _bundled_backends(root: Path) -> Path:
    """The Python backend with the stub of the running interpreter (a stub beside a model is not searched), and
    the native encoder backend where it was built, in a directory only this user can write."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / STUB
    if not stub.is_file():
        raise LaunchError(f"the bundled tritonserver has no Python-backend stub for Python {version}")
    dest = private_dir(Path(tempfile.gettempdir()) / backends_dir_name())
    python = dest / "python"
    python.mkdir(exist_ok=True)
    for src in [*(root / "backends" / "python").glob("*.*"), stub]:
        target = python / src.name
        if not target.exists() or target.stat().st_size != src.stat().st_size:
            shutil.copy2(src, target)
    if not native.install(dest):
        log.warning("the native %s backend is not built (%s): run `make setup`", native.NAME, native.LIBRARY)
    return dest


def backends_dir_name() -> str:
    """One directory per user, Python version and native library build: two checkouts (or a sanitizer build
    beside the release one) each install their own library, built against their own torch, rather than one
    replacing the other's between a server's start and the next."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    build = hashlib.sha256(str(native.LIBRARY.resolve()).encode()).hexdigest()[:12]
    return f"bertserve-backends-{os.getuid()}-py{version}-{build}"


def private_dir(path: Path) -> Path:
    """``path`` as a directory of this user's alone (0700): created so, or a real directory this user owns, made
    0700. Anything else there (a symlink, another user's directory) may hold what another local user planted for
    tritonserver to load: it is left alone, and a fresh private directory is used instead."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    st = path.lstat()
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
        path.chmod(0o700)
        return path
    fresh = Path(tempfile.mkdtemp(prefix=f"{path.name}-"))
    log.warning("%s is not a directory of this user's: using %s for the backends instead", path, fresh)
    return fresh


# The thread budget of the model processes, unless the environment sets its own. libgomp's workers spin for
# a long while after each parallel region and take the cores that the tokenizer, Triton and the clients need
# (on 2 busy cores `embed` went from 6 ms to 870 ms at concurrency 1); never spinning costs 8x per forward.
# A short spin keeps both: see docs/PERFORMANCE.md. Where bert runs on the CPU the tokenizer stays
# single-threaded beside it; where bert runs on a GPU (it needs next to no CPU) the tokenizer encodes each batch
# in parallel (32 texts: 3.2 -> 0.7 ms on the H200 host). The Kubernetes manifests set both variables themselves.
def thread_env(target: str) -> dict[str, str]:
    return {"GOMP_SPINCOUNT": "10000", "TOKENIZERS_PARALLELISM": "true" if target == "cuda" else "false"}


# What tritonserver, and through it every backend stub, must not inherit: the admin key when an operator set it
# through the environment. (tritonserver 2.51 takes the key on its command line only.)
SECRET_ENV = (f"{ENV_PREFIX}ADMIN_KEY",)


def locate(cfg: ServeConfig, index: dict) -> Server:
    """The tritonserver binary, its backends and the environment it runs in, for the repository of ``index``."""
    env = {**thread_env(index.get("target", "cpu")), **os.environ}
    for name in SECRET_ENV:
        env.pop(name, None)
    explicit = cfg.tritonserver or shutil.which("tritonserver")
    if explicit:
        binary = Path(explicit)
        backend_dir = Path(os.environ.get("TRITON_BACKEND_DIR", "/opt/tritonserver/backends"))
        return Server(binary, backend_dir, env)
    root = _bundled()
    libs = root.parent.parent / "nvidia_pytriton.libs"
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(libs), sysconfig.get_config_var("LIBDIR"), env.get("LD_LIBRARY_PATH", "")) if p
    )
    return Server(root / "bin" / "tritonserver", _bundled_backends(root), env)


def read_index(repo: Path) -> dict:
    """The repository's index (repository.json), which export writes last."""
    index_path = repo / REPOSITORY_INDEX
    if not repo.is_dir():
        raise LaunchError(f"model repository {repo} does not exist: run `make export` first")
    if not index_path.is_file():
        raise LaunchError(f"{repo} was not exported ({REPOSITORY_INDEX} missing): run `make export` first")
    return json.loads(index_path.read_text())


def select_models(repo: Path, index: dict, backend_dir: Path) -> list[str]:
    """Models to load: backend present and every file verified; ensembles listed even when a step failed, and
    every entry point (a model clients call) even when it fails verification, so that the server reports not
    ready rather than serving half a pipeline or one of its models missing."""
    entries = entry_points(index)
    load = []
    for name, spec in index["models"].items():
        backend = spec["backend"]
        if backend not in ALWAYS_PRESENT and not (backend_dir / backend).is_dir():
            log.info("not loading %s: this server has no %r backend (kept for stock Triton deployments)", name, backend)
            continue
        try:
            manifest = read(repo / name)
            verify(repo / name, manifest)
        except VerificationError as e:
            if name not in entries:
                log.error("not loading %s: %s", name, e)
                continue
            # A native entry point verifies its files itself and refuses to load: listed, it keeps the server not
            # ready, as an ensemble with a missing step does, rather than ready without one of its models.
            log.error("%s will not load: %s", name, e)
        else:
            _warn_if_tuned_elsewhere(name, manifest)
        load.append(name)
    for ensemble, steps in index.get("ensemble_requires", {}).items():
        missing = [s for s in steps if s not in load]
        if missing and ensemble in load:
            log.error("%s needs %s, which will not load: the server will not report ready", ensemble, missing)
    _warn_if_pools_oversubscribe(repo, [m for m in load if index["models"][m]["backend"] == native.NAME])
    return load


def _warn_if_pools_oversubscribe(repo: Path, native_models: list[str]) -> None:
    """The native backend runs every model's CPU forwards on one pool per intra-op thread count, each pool as many
    teams as the CPUs hold (backend/src/compute_pool.h): models of different thread counts get pools of their own,
    whose teams together outnumber the cores. Export gives every model of a repository one count; say so when a
    repository (edited by hand, or assembled from several) does not."""
    usable = usable_cpus()
    counts: dict[int, list[str]] = {}
    for name in native_models:
        if (threads := _config_threads(repo / name)) is not None:
            counts.setdefault(threads or usable, []).append(name)
    if len(counts) > 1:
        log.warning(
            "the native models ask for different intra-op thread counts (%s): each count gets a compute pool of its "
            "own, and together their threads outnumber the %d usable CPUs; export the models with one --threads",
            "; ".join(f"{t}: {', '.join(names)}" for t, names in sorted(counts.items())),
            usable,
        )


def _config_threads(model_dir: Path) -> int | None:
    """The model's ``threads`` parameter (0: the usable CPUs), or None where it has none or its config does not
    parse (the model's own load reports that)."""
    try:
        config = text_format.Parse((model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    except (OSError, text_format.ParseError):
        return None
    if "threads" not in config.parameters:
        return None
    return int(config.parameters["threads"].string_value or 0)


def _warn_if_tuned_elsewhere(name: str, manifest: dict) -> None:
    """Kernel choices timed on another processor may be slower on this one: say so, and how to re-tune (a warning,
    not a refusal: the package computes the same wherever its instruction set runs)."""
    tuning = manifest.get("autotune", {})
    if not tuning.get("ran"):
        return
    here = hardware.processor(manifest["target"])
    if tuning["tuned_for"] != here:
        log.warning(
            "%s was autotuned for %s, not for this machine's %s: its kernel choices may be slower here; "
            "re-export with --autotune on this machine",
            name,
            tuning["tuned_for"],
            here,
        )


def _roles(index: dict, models: list[str]) -> tuple[list[str], list[str]]:
    """Of the models to load: those the Python backend runs (the stub watchdog's), and the ensembles (drained first)."""
    python = [m for m in models if index["models"][m]["backend"] == "python"]
    return python, [m for m in index.get("ensemble_requires", {}) if m in models]


def command(
    cfg: ServeConfig, server: Server, models: list[str], admin_key: str | None = None, target: str = "cpu"
) -> list[str]:
    cmd = [
        str(server.binary),
        f"--model-repository={cfg.repository.resolve()}",
        f"--backend-directory={server.backend_dir}",
        "--model-control-mode=explicit",
        *[f"--load-model={m}" for m in models],
        "--exit-on-error=false",
        "--strict-readiness=true",
        f"--exit-timeout-secs={cfg.exit_timeout_s}",
        f"--http-address={cfg.host}",
        f"--http-port={cfg.http_port}",
        f"--grpc-address={cfg.host}",
        f"--grpc-port={cfg.grpc_port}",
        f"--metrics-address={cfg.host}",
        f"--metrics-port={cfg.metrics_port}",
        "--allow-metrics=true",
        "--metrics-config=summary_latencies=true",
        f"--log-verbose={cfg.log_verbose}",
        *frontends(cfg),
        *connection_age(cfg),
        *restricted(cfg, admin_key),
        *tls(cfg),
        *host_only(target),
    ]
    return cmd


def host_only(target: str) -> list[str]:
    """A CPU repository needs neither GPU metrics (NVML, DCGM) nor a pinned-memory pool: asking for them on a host
    without a GPU logs errors a user cannot tell from real ones."""
    if target == "cuda":
        return []
    return ["--allow-gpu-metrics=false", "--pinned-memory-pool-byte-size=0"]


def frontends(cfg: ServeConfig) -> list[str]:
    """The HTTP frontend's threads and the gRPC frontend's pool of request/response objects, where configured.
    Sized from the CPUs (16 threads and 256 objects on a 16-core H100 host) they served one text a request no
    better than tritonserver's own 8 and 8 (docs/PERFORMANCE.md), so tritonserver's stay the default."""
    out = []
    if cfg.http_threads:
        out.append(f"--http-thread-count={cfg.http_threads}")
    if cfg.grpc_allocation_pool:
        out.append(f"--grpc-infer-allocation-pool-size={cfg.grpc_allocation_pool}")
    return out


def connection_age(cfg: ServeConfig) -> list[str]:
    """GOAWAY after the configured age (tritonserver 2.51 takes milliseconds), so clients re-resolve and spread
    over replicas added since they connected."""
    if not cfg.grpc_max_connection_age_s:
        return []
    return [
        f"--grpc-max-connection-age={cfg.grpc_max_connection_age_s * 1000}",
        f"--grpc-max-connection-age-grace={cfg.grpc_max_connection_age_grace_s * 1000}",
    ]


def restricted(cfg: ServeConfig, key: str | None = None) -> list[str]:
    """Model load/unload, trace, logging and shared memory answer only calls that carry the admin key in
    ``admin_header``.

    Without a configured key, a random one per start: the APIs are closed to everyone but this launcher."""
    key = key or cfg.admin_key or secrets.token_urlsafe(32)
    spec = f"{','.join(RESTRICTED)}:{cfg.admin_header}={key}"
    return [f"--grpc-restricted-protocol={spec}", f"--http-restricted-api={spec}"]


def tls(cfg: ServeConfig) -> list[str]:
    if cfg.grpc_ssl_mutual:
        return [
            "--grpc-use-ssl-mutual=true",
            f"--grpc-server-cert={cfg.grpc_server_cert}",
            f"--grpc-server-key={cfg.grpc_server_key}",
            f"--grpc-root-cert={cfg.grpc_root_cert}",
        ]
    if cfg.grpc_use_ssl:
        return [
            "--grpc-use-ssl=true",
            f"--grpc-server-cert={cfg.grpc_server_cert}",
            f"--grpc-server-key={cfg.grpc_server_key}",
        ]
    return []


def _warn_exposure(cfg: ServeConfig) -> None:
    if cfg.loopback_only:
        return
    if not cfg.grpc_ssl_mutual:
        log.warning(
            "gRPC inference on %s is open to anyone who can reach it: use --grpc-ssl-mutual, or keep the server on "
            "loopback behind the authenticating proxy",
            cfg.host,
        )
    log.warning("HTTP on %s has no TLS in this tritonserver: expose it only through the proxy", cfg.host)


WATCH_INTERVAL_S = 1.0


class StubWatchdog(threading.Thread):
    """Reloads a Python-backend model whose stub died (tritonserver 2.51 answers 'Stub process is not healthy'
    for it and never restarts it, while still reporting it ready): unload, then load, through the restricted
    model-repository API with the launcher's admin key."""

    def __init__(self, admin: Admin, proc: subprocess.Popen, models: list[str]) -> None:
        super().__init__(name="stub-watchdog", daemon=True)
        self.admin, self.proc, self.models = admin, proc, models
        self.stopping = threading.Event()
        self.seen: set[str] = set()
        self.regions: set[str] = set()  # every stub's, for the launcher to remove should tritonserver be killed

    def run(self) -> None:
        while not self.stopping.wait(WATCH_INTERVAL_S) and self.proc.poll() is None:
            running = stubs(self.proc.pid)
            self.regions.update(region for _, region in running)
            alive = {model for model, _ in running} & set(self.models)
            for model in sorted(self.seen - alive):
                if self.stopping.is_set():
                    return
                if not self.admin.ready(model):  # unloaded on purpose (or loading): not ours to undo
                    self.seen.discard(model)
                    continue
                log.error("the backend stub of %s died: reloading the model", model)
                start = time.monotonic()
                try:
                    self.admin.unload(model)
                    self.admin.load(model)
                    log.info("reloaded %s in %.1f s", model, time.monotonic() - start)
                except OSError as e:
                    log.error("reloading %s failed: %s", model, e)
            self.seen |= alive


def _own_process_group() -> None:
    """In the child before exec: a process group of its own, so that a terminal's Ctrl-C (SIGINT to the whole
    foreground group) reaches the launcher alone and the drain decides when tritonserver stops; and SIGTERM
    should the launcher die first, so that no server outlives it."""
    os.setpgid(0, 0)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@contextlib.contextmanager
def private_tmpdir(env: dict[str, str]) -> Iterator[Path]:
    """TMPDIR of tritonserver and its stubs: a directory of this server's own, removed when it exits, however it
    exits. Each AOTInductor package unpacks its shared library and kernels there at load (70-90 MB for MiniLM) and
    removes them only when its model unloads, so every killed server would leave them behind in /tmp. What a
    killed launcher left (a container killed whole, whose /tmp outlives it) goes at the next start."""
    root = Path(tempfile.gettempdir())
    _remove_abandoned(root)
    path = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=root))
    with (path / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        env["TMPDIR"] = str(path)
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)


def _remove_abandoned(root: Path) -> None:
    """The scratch directories in ``root`` whose launcher is gone: their lock is free (a running launcher holds
    its own) and they are older than a start takes to lock one."""
    for path in root.glob(f"{SCRATCH_PREFIX}*"):
        try:
            if time.time() - path.stat().st_mtime < SCRATCH_GRACE_S:
                continue
            with (path / ".lock").open("a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(path, ignore_errors=True)
                log.info("removed %s, left by a server that was killed", path)
        except OSError:  # held by a running launcher, or not a directory of ours
            continue


def serve(cfg: ServeConfig) -> int:
    """Run tritonserver in the foreground; SIGINT/SIGTERM are passed on so that it drains and exits."""
    log.info("serve config: %s (admin key %s)", cfg, "configured" if cfg.admin_key else "random, APIs closed")
    _warn_exposure(cfg)
    index = read_index(cfg.repository)
    server = locate(cfg, index)
    models = select_models(cfg.repository, index, server.backend_dir)
    if not models:
        raise LaunchError(f"no model of {cfg.repository} can be loaded")
    key = cfg.admin_key or secrets.token_urlsafe(32)
    cmd = command(cfg, server, models, key, index.get("target", "cpu"))
    log.info("starting %s with models %s", server.binary, ", ".join(models))
    log.info("entry points: %s", ", ".join(f"{m} ({task})" for m, task in entry_points(index).items()))
    if index.get("target", "cpu") == "cpu":
        log.info(
            "CPU repository: tritonserver's own CUDA probes log 'CudaDriverHelper has not been initialized' and, "
            "for an ensemble, 'unable to create stream'; on a host without a GPU both are expected and harmless"
        )
    with private_tmpdir(server.env):
        proc = subprocess.Popen(cmd, env=server.env, preexec_fn=_own_process_group)
        gateway = gateway_process.start(cfg, _own_process_group)
        admin = Admin(cfg, key)
        python_models, ensembles = _roles(index, models)
        watchdog = StubWatchdog(admin, proc, python_models)
        watchdog.start()
        stopping = threading.Event()
        drained: list[bool] = []
        drains: list[threading.Thread] = []

        def forward(signum: int, _frame: object) -> None:
            watchdog.stopping.set()
            if stopping.is_set():  # a second signal: no more waiting for the ensembles
                log.info("received %s again: stopping tritonserver now", signal.Signals(signum).name)
                proc.terminate()
                return
            stopping.set()
            if gateway:
                gateway.terminate()  # it stops accepting and answers what is in flight as tritonserver drains
            log.info(
                "received %s: draining in-flight requests (up to %d s)", signal.Signals(signum).name, cfg.exit_timeout_s
            )

            def drain() -> None:
                drained.append(drain_then_stop(admin, proc, ensembles, cfg.exit_timeout_s, models))

            drains.append(threading.Thread(target=drain, name="drain", daemon=True))
            drains[-1].start()

        signal.signal(signal.SIGINT, forward)
        signal.signal(signal.SIGTERM, forward)
        code = proc.wait()
        watchdog.stopping.set()
        gateway_process.stop(gateway, STOP_GRACE_S)
        for thread in drains:  # the drain that killed tritonserver has its verdict to give
            thread.join(timeout=STOP_GRACE_S + 1)
        log.info("tritonserver exited with %d", code)
        watchdog.join(timeout=WATCH_INTERVAL_S + 1)  # it ends with tritonserver; then its regions are complete
        remove_regions(watchdog.regions)
        if code != 0 and drained == [True]:
            log.info("every accepted request was answered before tritonserver stopped: exiting 0")
            return 0
        return code
