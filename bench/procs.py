"""Server subprocesses, for the bench and for the tests: start on a free loopback port, wait for /ready,
inspect, stop with one SIGTERM.

Stopping sends SIGTERM once (the graceful drain an orchestrator asks for), waits, and sends SIGKILL only
past a timeout. Never a second SIGTERM: uvicorn takes a second signal as "force quit", and one that
arrives while the interpreter is finalising (its handlers already reset) kills the process with -15.

Logs go to a file, not a pipe: nobody reads a pipe while the server runs, and a full pipe (64 KiB of
access log) would block the server's next write, and so the server.

Process facts come from /proc (Linux): VmRSS of the server and its children, threads, open file
descriptors, and whether any libtorch is mapped into it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[1]  # the repository: `python -m bench.naive_server` runs from here


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    peak_rss_kb: int = field(default=0)
    signalled: bool = field(default=False)  # SIGTERM sent: never send another

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def sample_rss(self) -> int:
        self.peak_rss_kb = max(self.peak_rss_kb, tree_rss_kb(self.proc.pid))
        return self.peak_rss_kb


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without ATTNSERVE_* variables (so only flags and `extra` configure the server)."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}, **extra}


def launch(
    name: str, argv: list[str], log_path: Path, env: Mapping[str, str] | None = None, cwd: Path = ROOT,
) -> Server:
    """Start `argv` (its "{port}" replaced by a free loopback port) from `cwd` (the repository root: `python -m`
    runs the code there), its stdout and stderr in `log_path`, with `env` (default: this environment). Does
    not wait."""
    port = free_port()
    argv = [a.replace("{port}", str(port)) for a in argv]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, cwd=cwd, env=dict(os.environ if env is None else env),
                                stdout=log, stderr=subprocess.STDOUT)
    return Server(name, proc, port, log_path)


def wait_ready(server: Server, timeout_s: float = 180.0, path: str = "/ready") -> bool:
    """True once GET `path` answers 200; False when the process exits or `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and server.proc.poll() is None:
        try:
            if httpx.get(server.url + path, timeout=2.0).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    return False


def start(name: str, argv: list[str], env: Mapping[str, str], log_dir: Path, ready_s: float = 180.0,
          ready_path: str = "/ready", cwd: Path = ROOT) -> Server:
    """launch() from `cwd` with this environment plus `env`, and wait for `ready_path`; RuntimeError (process
    stopped) if it exits or is not ready within `ready_s`."""
    server = launch(name, argv, log_dir / f"{name}.log", {**os.environ, **env}, cwd)
    if not wait_ready(server, ready_s, ready_path):
        status = terminate(server)
        raise RuntimeError(f"{name} not ready after {ready_s:.0f} s (exit status {status}); see {server.log_path}")
    return server


def sigterm(server: Server) -> None:
    """Ask for the graceful drain: SIGTERM, once per server, and only while it runs."""
    if not server.signalled and server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        server.signalled = True


def terminate(server: Server, timeout_s: float = 30.0) -> int:
    """SIGTERM (unless already sent), wait up to `timeout_s`, SIGKILL past it; returns the exit status
    (negative: the signal that ended it, so -9 means it had to be killed)."""
    sigterm(server)
    try:
        server.proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
    return server.proc.returncode


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(c) for c in task.read_text().split()]
        except OSError:
            continue
    return found


def tree_rss_kb(pid: int) -> int:
    """VmRSS of pid plus its descendants, in kB (0 for processes already gone)."""
    return _rss_kb(pid) + sum(tree_rss_kb(child) for child in children(pid))


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of pid plus its descendants (0 for processes already gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return own + sum(tree_cpu_s(child) for child in children(pid))


def _rss_kb(pid: int) -> int:
    try:
        return _status(pid)["VmRSS"]
    except (OSError, KeyError):
        return 0


def _status(pid: int) -> dict[str, int]:
    """The numeric fields of /proc/<pid>/status (kB for memory fields)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if value.split() and value.split()[0].isdigit():
            fields[key] = int(value.split()[0])
    return fields


def proc_stats(pid: int) -> dict[str, int]:
    """Resident memory (kB), threads and open file descriptors of one process (not its children)."""
    status, fds = _status(pid), len(list(Path(f"/proc/{pid}/fd").iterdir()))
    return {"rss_kb": status["VmRSS"], "threads": status["Threads"], "fds": fds}


def torch_mapped(pid: int) -> bool:
    """True when the process (or a child) has libtorch or torch's package directory mapped."""
    for one in [pid, *children(pid)]:
        try:
            maps = Path(f"/proc/{one}/maps").read_text()
        except OSError:
            continue
        if "libtorch" in maps or "/torch/lib/" in maps:
            return True
    return False


def service_argv(bundle: Path, *flags: str) -> list[str]:
    """The Dockerfile's entry command, on loopback, with a "{port}" placeholder for launch()."""
    return [sys.executable, "-m", "attnserve", "serve", "--bundle", str(bundle), "--host", HOST, "--port", "{port}",
            *flags]


def naive_argv(bundle: Path, variant: str) -> list[str]:
    return [sys.executable, "-m", "bench.naive_server", "--bundle", str(bundle), "--variant", variant,
            "--port", "{port}"]
