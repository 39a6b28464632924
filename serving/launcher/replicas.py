"""``python -m serving.launcher.replicas``: N tritonservers on one repository behind nginx, balancing gRPC per request.

gRPC keeps one HTTP/2 connection per client, so balancing per connection would pin a client to one replica;
nginx's ``grpc_pass`` picks an upstream per call (per HTTP/2 stream). Replica i listens on
``base_port + 10*i`` (HTTP), ``+1`` (gRPC), ``+2`` (metrics, scraped per replica), ``+3`` (the OpenAI and TEI
gateway); nginx takes the front ports.

The front door is where traffic from beyond loopback arrives, so it carries the limits: with ``--api-keys FILE``
(lines ``client-name key``) every call needs ``authorization: Bearer <key>`` (else HTTP 401, gRPC
UNAUTHENTICATED); each client (its key's name, else its address) gets ``--rate`` requests/s with a burst of
``--burst`` (over it: HTTP 429, gRPC UNAVAILABLE); a request body over ``--max-body`` is refused (HTTP 413).
The replicas' metrics ports stay on loopback and are not proxied.

Under overload the front door sheds the way one server does: a replica's refusal (gRPC UNAVAILABLE,
HTTP 503) goes back to the client as it is. nginx passes a call to another replica only when it never reached
one (connection refused or reset before the request went out; inference is a POST, which nginx never resends
once sent), at most once, and only such connection errors count towards taking a replica out (3 within 5 s).
Retrying refusals would multiply the load exactly when there is none to spare, and counting them as failures
would take every replica out in turn. nginx's warnings (a replica taken out, no live replica) go to stderr.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from common import options
from common.options import option
from serving.launcher.config import ENV_PREFIX, LOOPBACK, ServeConfig
from serving.launcher.server import LaunchError, read_index

log = logging.getLogger(__name__)

PROG = "python -m serving.launcher.replicas"
DESCRIPTION = __doc__.splitlines()[0].split(": ", 1)[1]

# Replica i's ports start here (deploy/prometheus/prometheus.yml scrapes the metrics ports of the first four).
DEFAULT_BASE_PORT = 8100

# nginx's configuration, filled per start (deploy/nginx/ holds it with the other deployment files).
NGINX_TEMPLATE = Path(__file__).resolve().parents[2] / "deploy" / "nginx" / "front-door.conf.template"


@dataclass(frozen=True)
class Replica:
    index: int
    http_port: int
    grpc_port: int
    metrics_port: int
    gateway_port: int


def replicas(n: int, base_port: int) -> list[Replica]:
    return [Replica(i, *(base_port + 10 * i + k for k in range(4))) for i in range(n)]


def cpu_shares(n: int, cpus: list[int]) -> list[list[int]]:
    """Replica i's CPUs where the models run on the CPU: the usable ones split into n contiguous shares, as even
    as they divide (more replicas than CPUs share them in turn). Each replica sizes its compute pool from its
    affinity; unpinned, every replica took all the cores, and two on 2 cores answered 4 clients at a p50 of
    170 ms against 37 ms on a core each (docs/PERFORMANCE.md, `python -m bench.replicas`)."""
    if n >= len(cpus):
        return [[cpus[i % len(cpus)]] for i in range(n)]
    size, extra = divmod(len(cpus), n)
    starts = [i * size + min(i, extra) for i in range(n + 1)]
    return [cpus[starts[i] : starts[i + 1]] for i in range(n)]


def _runs_on_cpu(repository: Path) -> bool:
    try:
        return read_index(repository).get("target", "cpu") == "cpu"
    except (LaunchError, OSError, ValueError):
        return False  # the replicas' own start reports it


@dataclass(frozen=True)
class FrontDoor:
    """What nginx enforces before a call reaches a replica."""

    api_keys: dict[str, str] | None = None  # key -> client name; None: no authentication (loopback use)
    rate: float = 1000.0  # requests/s per client
    burst: int = 200
    max_body: str = "4m"  # 32 texts of 64 KiB fit twice
    tls: tuple[Path, Path] | None = None  # (certificate, private key), PEM: both front ports speak TLS

    def __post_init__(self) -> None:
        nginx_rate(self.rate)  # refuses a rate nginx cannot take, before anything starts
        for path in self.tls or ():
            if not path.is_file():
                raise ValueError(f"TLS file {path} does not exist")


def read_api_keys(path: Path) -> dict[str, str]:
    """``client-name key`` per line (``#`` comments); keys must be unique and printable without spaces or quotes."""
    keys: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or not all(re.fullmatch(r"[A-Za-z0-9._~+/=-]+", p) for p in parts):
            raise ValueError(f"{path}:{n}: expected 'client-name key' (letters, digits, ._~+/=-)")
        name, key = parts
        if key in keys:
            raise ValueError(f"{path}:{n}: key of {name!r} is already used by {keys[key]!r}")
        keys[key] = name
    if not keys:
        raise ValueError(f"{path}: no keys")
    return keys


def nginx_rate(per_s: float) -> str:
    """nginx takes whole requests per second or per minute."""
    if per_s <= 0:
        raise ValueError(f"rate must be positive, got {per_s}")
    return f"{int(per_s)}r/s" if float(per_s).is_integer() else f"{max(1, round(per_s * 60))}r/m"


def key_pattern(key: str) -> str:
    """The map entry's regular expression for ``Bearer <key>``: the key exactly, case and all (read_api_keys
    allows no character that a bracket expression cannot hold literally)."""
    literal = "".join(f"[{c}]" if c in ".+" else c for c in key)
    return f"~^(?i:bearer) {literal}$"


def nginx_tls(tls: tuple[Path, Path] | None) -> str:
    if tls is None:
        return ""
    cert, key = (p.resolve() for p in tls)
    return f"    ssl_certificate {cert};\n    ssl_certificate_key {key};\n    ssl_protocols TLSv1.2 TLSv1.3;"


def nginx_conf(
    reps: list[Replica],
    host: str,
    http_port: int,
    grpc_port: int,
    workdir: Path,
    door: FrontDoor,
    gateway_port: int = ServeConfig.gateway_port,
) -> str:
    def servers(port_of) -> str:
        return "\n".join(f"        server 127.0.0.1:{port_of(r)} max_fails=3 fail_timeout=5s;" for r in reps)

    return NGINX_TEMPLATE.read_text().format(
        dir=workdir,
        host=host,
        http_port=http_port,
        grpc_port=grpc_port,
        grpc_servers=servers(lambda r: r.grpc_port),
        http_servers=servers(lambda r: r.http_port),
        gateway_port=gateway_port,
        gateway_servers=servers(lambda r: r.gateway_port),
        max_body=door.max_body,
        # Without keys every caller is let in and limited by address; with keys, only a known key gets a name.
        anonymous="" if door.api_keys else "$binary_remote_addr",
        keys="\n".join(f'        "{key_pattern(k)}" "{name}";' for k, name in (door.api_keys or {}).items()),
        rate=nginx_rate(door.rate),
        burst=door.burst,
        tls=nginx_tls(door.tls),
        ssl=" ssl" if door.tls else "",
    )


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


@dataclass(frozen=True)
class ReplicasConfig:
    """`make serve REPLICAS=N`: its options share the BERTSERVE_SERVE_ family with one server's."""

    replicas: int = option(2, "tritonservers to start, each on its own ports from --base-port")
    repository: Path = option(ServeConfig.repository, "the exported model repository every replica serves")
    host: str = option(ServeConfig.host, "address nginx's front ports bind to (0.0.0.0 exposes them; see README)")
    http_port: int = option(ServeConfig.http_port, "nginx's HTTP front port")
    grpc_port: int = option(ServeConfig.grpc_port, "nginx's gRPC front port")
    gateway_port: int = option(ServeConfig.gateway_port, "nginx's front port of the OpenAI and TEI routes")
    base_port: int = option(DEFAULT_BASE_PORT, "replica i listens on base + 10*i (HTTP), +1 (gRPC), +2 (metrics)")
    share_cpus: bool = option(True, "on a CPU repository, run each replica on its own share of the CPUs")
    ready_timeout_s: float = option(180.0, "how long the replicas may take to become ready")
    api_keys: Path | None = option(
        None, "file of 'client-name key' lines; calls then need 'authorization: Bearer <key>'", shown="no keys"
    )
    rate: float = option(FrontDoor.rate, "requests/s per client (key name, else address)")
    burst: int = option(FrontDoor.burst, "requests per client beyond --rate that are let through at once")
    max_body: str = option(FrontDoor.max_body, "largest request body nginx takes (nginx size: 4m is 4 MiB)")
    tls_cert: Path | None = option(
        None, "certificate (PEM) for TLS on both front ports, with --tls-key", shown="no TLS"
    )
    tls_key: Path | None = option(None, "the certificate's private key (PEM)", shown="no TLS")

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"--replicas must be at least 1, got {self.replicas}")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both --tls-cert and --tls-key")


def parse_args(argv: list[str] | None = None) -> ReplicasConfig:
    """Exits with argparse's message (status 2) on an invalid option or variable."""
    return options.parse(ReplicasConfig, argv, prefix=ENV_PREFIX, prog=PROG, description=DESCRIPTION)


def _front_door(a: ReplicasConfig) -> FrontDoor | None:
    """The front door the options describe, or None (logged) when they cannot make one."""
    try:
        keys = read_api_keys(a.api_keys) if a.api_keys else None
        tls = (a.tls_cert, a.tls_key) if a.tls_cert and a.tls_key else None
        door = FrontDoor(keys, a.rate, a.burst, a.max_body, tls)
    except (OSError, ValueError) as e:
        log.error("front door: %s", e)
        return None
    if door.api_keys is None and a.host not in LOOPBACK:
        log.warning("listening on %s without --api-keys: anyone who reaches it may call the models", a.host)
    if door.api_keys and door.tls is None and a.host not in LOOPBACK:
        log.warning("listening on %s without --tls-cert: API keys cross the network in clear text", a.host)
    return door


def _start_replicas(a: ReplicasConfig, reps: list[Replica]) -> list[subprocess.Popen]:
    procs = []
    on_cpu = a.share_cpus and _runs_on_cpu(a.repository)
    shares = cpu_shares(len(reps), sorted(os.sched_getaffinity(0))) if on_cpu else None
    for r in reps:
        # The replicas inherit the BERTSERVE_SERVE_* variables; they stay on loopback whatever HOST says (nginx's).
        cmd = [sys.executable, "-m", "serving", "--repository", str(a.repository), "--host", "127.0.0.1",
               "--http-port", str(r.http_port), "--grpc-port", str(r.grpc_port),
               "--metrics-port", str(r.metrics_port), "--gateway-port", str(r.gateway_port)]  # fmt: skip
        if shares is None:
            procs.append(subprocess.Popen(cmd))
            continue
        log.info("replica %d runs on CPUs %s", r.index, ",".join(map(str, shares[r.index])))
        procs.append(subprocess.Popen(cmd, preexec_fn=functools.partial(os.sched_setaffinity, 0, shares[r.index])))
    return procs


SUPERVISE_POLL_S = 0.5


def _supervise(a: ReplicasConfig, reps: list[Replica], nginx: str, conf: Path, stopping: threading.Event) -> int:
    """Start the replicas, then nginx once they are ready; stop everything on a signal or when nginx dies.
    Returns 1 when the replicas never became ready or nginx died, else the worst exit status of the processes."""
    procs = _start_replicas(a, reps)
    front: list[subprocess.Popen] = []  # nginx, once started
    try:
        result = _serve(a, reps, procs, [nginx, "-p", str(conf.parent), "-c", str(conf)], front, stopping)
    finally:
        for p in front:
            if p.poll() is None:
                p.send_signal(signal.SIGQUIT)  # graceful: finishes the calls it is passing on
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)  # each drains its own
        codes = [p.wait() for p in front + procs]
    return result or max(codes, key=abs)


def _serve(
    a: ReplicasConfig,
    reps: list[Replica],
    procs: list[subprocess.Popen],
    nginx_cmd: list[str],
    front: list[subprocess.Popen],
    stopping: threading.Event,
) -> int:
    deadline = time.monotonic() + a.ready_timeout_s
    while not stopping.is_set() and not all(_ready(r.http_port) for r in reps):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            log.error("replicas did not all become ready; stopping")
            return 1
        stopping.wait(SUPERVISE_POLL_S)
    if stopping.is_set():
        return 0
    front.append(subprocess.Popen(nginx_cmd))
    log.info(
        "%d replicas ready behind nginx: gRPC %s:%d, HTTP %s:%d; replica metrics on %s",
        len(reps), a.host, a.grpc_port, a.host, a.http_port, ", ".join(str(r.metrics_port) for r in reps),
    )  # fmt: skip
    while not stopping.wait(SUPERVISE_POLL_S):
        if front[0].poll() is not None:
            log.error("nginx exited with %d: stopping the replicas", front[0].returncode)
            return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    a = parse_args(argv)
    door = _front_door(a)
    if door is None:
        return 2
    if not NGINX_TEMPLATE.is_file():
        log.error("%s is missing: the replicas run from a checkout of the project", NGINX_TEMPLATE)
        return 2
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        log.error("nginx is not installed (Debian package nginx; `make tools` installs it)")
        return 2
    # Installed before anything starts: a signal during the readiness wait stops what started and removes the
    # configuration, which holds the keys.
    stopping = threading.Event()

    def stop(signum: int, _frame: object) -> None:
        log.info("received %s: stopping nginx, then draining the replicas", signal.Signals(signum).name)
        stopping.set()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    reps = replicas(a.replicas, a.base_port)
    workdir = Path(tempfile.mkdtemp(prefix="bertserve-nginx-"))
    try:
        conf = workdir / "nginx.conf"
        conf.touch(mode=0o600)  # it holds the keys
        conf.write_text(nginx_conf(reps, a.host, a.http_port, a.grpc_port, workdir, door, a.gateway_port))
        check = subprocess.run([nginx, "-t", "-q", "-p", str(workdir), "-c", str(conf)], capture_output=True, text=True)
        if check.returncode != 0:
            log.error("nginx rejects the generated configuration: %s", check.stderr.strip())
            return 2
        return _supervise(a, reps, nginx, conf, stopping)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
