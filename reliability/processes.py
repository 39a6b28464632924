"""The server under test as processes: start ``python -m serving`` on free loopback ports, find the stubs, sample
resident memory and open file descriptors from /proc, stop everything that was started."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from serving.launcher.stubs import STUB, remove_regions, stubs

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(
    url: str, headers: dict[str, str] | None = None, body: bytes | None = None, timeout_s: float = 30
) -> int:
    """The HTTP status of a GET (or a POST of ``body``); 0 when nothing answered."""
    req = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


@dataclass
class ServerProcess:
    process: subprocess.Popen
    grpc_url: str
    http_url: str
    metrics_url: str
    log_path: Path
    repository: Path | None = None
    gateway_url: str = ""  # the OpenAI and TEI routes
    # The stubs' shared-memory regions seen while it ran: a server that exits by a signal of the caller's, or is
    # killed, can leave them in /dev/shm; stop() removes those still there.
    regions: set[str] = field(default_factory=set)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def http_status(self, path: str, timeout_s: float = 1.0) -> int:
        return http_status(f"http://{self.http_url}{path}", timeout_s=timeout_s)

    @property
    def ports(self) -> tuple[int, int, int]:
        return tuple(int(u.rsplit(":", 1)[1]) for u in (self.http_url, self.grpc_url, self.metrics_url))

    def ready(self) -> bool:
        return self.http_status("/v2/health/ready") == 200

    def wait_ready(self, timeout_s: float = 180, poll_s: float = 0.1) -> float:
        """Until the server is ready and its metrics answer: tritonserver starts its metrics service after the
        inference endpoints, and a caller that reads the metrics first thing found nothing listening there."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()[-4000:]}")
            if self.ready() and http_status(f"http://{self.metrics_url}/metrics", timeout_s=1.0) == 200:
                self.note_regions()
                return time.monotonic() - start
            time.sleep(poll_s)
        raise TimeoutError(f"server not ready after {timeout_s} s:\n{self.log()[-4000:]}")

    def tritonserver_pid(self) -> int:
        """The tritonserver child of the launcher."""
        for pid in children(self.process.pid):
            if Path(argv(pid)[0]).name == "tritonserver":
                return pid
        raise LookupError(f"no tritonserver under pid {self.process.pid}")

    def stub_pid(self, model: str) -> int:
        """The Python-backend stub serving ``model`` (its first argument is the model's model.py)."""
        for pid in descendants(self.tritonserver_pid()):
            args = argv(pid)
            if Path(args[0]).name == STUB and len(args) > 1 and args[1].endswith(f"/{model}/1/model.py"):
                return pid
        raise LookupError(f"no backend stub of {model!r} under tritonserver")

    def note_regions(self) -> None:
        """Remember the shared-memory regions of the stubs running now."""
        with contextlib.suppress(LookupError):
            self.regions.update(region for _, region in stubs(self.tritonserver_pid()))

    def processes(self) -> list[int]:
        """tritonserver and every stub under it."""
        server = self.tritonserver_pid()
        return [server, *descendants(server)]


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def descendants(pid: int) -> list[int]:
    out, todo = [], children(pid)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children(p))
    return out


def argv(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return [""]
    return raw.decode(errors="replace").rstrip("\0").split("\0")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process and of its waited-for children, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def parse_cpus(text: str) -> set[int]:
    """A CPU list as taskset writes it ("0,1", "2-15", "0,4-7") as a set."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def load_beside(server_cpus: set[int] | None) -> None:
    """This process (the load) moves off the server's CPUs, where others are left to it."""
    if server_cpus and (others := os.sched_getaffinity(0) - server_cpus):
        os.sched_setaffinity(0, others)


def start(
    repository: Path,
    log_path: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    ports: tuple[int, int, int] | None = None,
    cpus: set[int] | None = None,
) -> ServerProcess:
    """``python -m serving`` on ``ports`` (http, grpc, metrics), free ones when not given; on ``cpus`` only when
    given (the launcher's affinity, which tritonserver inherits)."""
    http, grpc, metrics = ports or (free_port(), free_port(), free_port())
    gateway = free_port()
    cmd = [
        sys.executable, "-m", "serving", "--repository", str(repository),
        "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
        "--gateway-port", str(gateway), *extra,
    ]  # fmt: skip
    # A session of its own, as a shell gives a foreground job: a caller can signal the whole group as a terminal does.
    with log_path.open("w") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
    urls = (f"127.0.0.1:{grpc}", f"127.0.0.1:{http}", f"127.0.0.1:{metrics}")
    return ServerProcess(proc, *urls, log_path, repository, f"127.0.0.1:{gateway}")


def stop(server: ServerProcess, timeout_s: float = 60, sig: int = signal.SIGTERM) -> int:
    """``sig`` (SIGTERM: drain) to the launcher and tritonserver, then SIGKILL of whatever is left."""
    left: list[int] = []
    if server.process.poll() is None:
        with contextlib.suppress(LookupError):
            left = server.processes()
        server.note_regions()
    if server.process.poll() is None:
        server.process.send_signal(sig)
        if sig == signal.SIGKILL and left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(left[0], signal.SIGKILL)
        try:
            server.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
    for pid in left:  # a stub that outlived its server; a pid reused since is left alone
        if Path(argv(pid)[0]).name in (STUB, "tritonserver"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    remove_regions(server.regions)  # a killed server leaves its stubs' shared-memory regions behind
    return server.process.returncode


@contextlib.contextmanager
def running(
    repository: Path, log_path: Path, *extra: str, ready_timeout_s: float = 180, cpus: set[int] | None = None
) -> Iterator[ServerProcess]:
    server = start(repository, log_path, *extra, cpus=cpus)
    try:
        server.wait_ready(ready_timeout_s)
        yield server
    finally:
        stop(server)
