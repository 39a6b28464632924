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

import logging
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from serving import options
from serving.launcher.config import ENV_PREFIX, LOOPBACK, ServeConfig
from serving.options import option

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


@dataclass(frozen=True)
class FrontDoor:
    """What nginx enforces before a call reaches a replica."""

    api_keys: dict[str, str] | None = None  # key -> client name; None: no authentication (loopback use)
    rate: float = 1000.0  # requests/s per client
    burst: int = 200
    max_body: str = "4m"  # 32 texts of 64 KiB fit twice

    def __post_init__(self) -> None:
        nginx_rate(self.rate)  # refuses a rate nginx cannot take, before anything starts


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
        keys="\n".join(f'        "Bearer {k}" "{name}";' for k, name in (door.api_keys or {}).items()),
        rate=nginx_rate(door.rate),
        burst=door.burst,
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
    ready_timeout_s: float = option(180.0, "how long the replicas may take to become ready")
    api_keys: Path | None = option(
        None, "file of 'client-name key' lines; calls then need 'authorization: Bearer <key>'", shown="no keys"
    )
    rate: float = option(FrontDoor.rate, "requests/s per client (key name, else address)")
    burst: int = option(FrontDoor.burst, "requests per client beyond --rate that are let through at once")
    max_body: str = option(FrontDoor.max_body, "largest request body nginx takes (nginx size: 4m is 4 MiB)")

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"--replicas must be at least 1, got {self.replicas}")


def parse_args(argv: list[str] | None = None) -> ReplicasConfig:
    """Exits with argparse's message (status 2) on an invalid option or variable."""
    return options.parse(ReplicasConfig, argv, prefix=ENV_PREFIX, prog=PROG, description=DESCRIPTION)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    a = parse_args(argv)
    try:
        door = FrontDoor(read_api_keys(a.api_keys) if a.api_keys else None, a.rate, a.burst, a.max_body)
    except (OSError, ValueError) as e:
        log.error("front door: %s", e)
        return 2
    if door.api_keys is None and a.host not in LOOPBACK:
        log.warning("listening on %s without --api-keys: anyone who reaches it may call the models", a.host)
    if not NGINX_TEMPLATE.is_file():
        log.error("%s is missing: the replicas run from a checkout of the project", NGINX_TEMPLATE)
        return 2
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        log.error("nginx is not installed (Debian package nginx; `make tools` installs it)")
        return 2
    reps = replicas(a.replicas, a.base_port)
    workdir = Path(tempfile.mkdtemp(prefix="bertserve-nginx-"))
    conf = workdir / "nginx.conf"
    conf.write_text(nginx_conf(reps, a.host, a.http_port, a.grpc_port, workdir, door, a.gateway_port))
    conf.chmod(0o600)  # it holds the keys
    check = subprocess.run([nginx, "-t", "-q", "-p", str(workdir), "-c", str(conf)], capture_output=True, text=True)
    if check.returncode != 0:
        log.error("nginx rejects the generated configuration: %s", check.stderr.strip())
        return 2
    procs = []
    for r in reps:
        # The replicas inherit the BERTSERVE_SERVE_* variables; they stay on loopback whatever HOST says (nginx's).
        cmd = [sys.executable, "-m", "serving", "--repository", str(a.repository), "--host", "127.0.0.1",
               "--http-port", str(r.http_port), "--grpc-port", str(r.grpc_port),
               "--metrics-port", str(r.metrics_port), "--gateway-port", str(r.gateway_port)]  # fmt: skip
        procs.append(subprocess.Popen(cmd))
    deadline = time.monotonic() + a.ready_timeout_s
    while not all(_ready(r.http_port) for r in reps):
        if time.monotonic() > deadline or any(pr.poll() is not None for pr in procs):
            log.error("replicas did not all become ready; stopping")
            for pr in procs:
                pr.terminate()
            return 1
        time.sleep(0.5)
    front = subprocess.Popen([nginx, "-p", str(workdir), "-c", str(conf)])
    log.info(
        "%d replicas ready behind nginx: gRPC %s:%d, HTTP %s:%d; replica metrics on %s",
        len(reps), a.host, a.grpc_port, a.host, a.http_port, ", ".join(str(r.metrics_port) for r in reps),
    )  # fmt: skip

    def stop(signum: int, _frame: object) -> None:
        log.info("received %s: stopping nginx, then draining the replicas", signal.Signals(signum).name)
        front.send_signal(signal.SIGQUIT)
        for pr in procs:
            pr.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    codes = [front.wait(), *[pr.wait() for pr in procs]]
    shutil.rmtree(workdir, ignore_errors=True)
    return max(codes, key=abs)


if __name__ == "__main__":
    sys.exit(main())
