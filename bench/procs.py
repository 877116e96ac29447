"""Server subprocesses for the bench: start on a free loopback port, wait for /ready, inspect, stop.

Process facts come from /proc (Linux): VmRSS of the server and its children, and whether any
libtorch is mapped into it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

HOST = "127.0.0.1"


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

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def sample_rss(self) -> int:
        self.peak_rss_kb = max(self.peak_rss_kb, tree_rss_kb(self.proc.pid))
        return self.peak_rss_kb


def start(name: str, argv: list[str], env: dict[str, str], log_dir: Path, ready_s: float = 180.0) -> Server:
    """Launch `argv` (its "{port}" replaced by a free loopback port) and wait for GET /ready."""
    port = free_port()
    log_path = log_dir / f"{name}.log"
    argv = [a.replace("{port}", str(port)) for a in argv]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env})
    server = Server(name, proc, port, log_path)
    _wait_ready(server, ready_s)
    return server


def _wait_ready(server: Server, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.proc.returncode}; see {server.log_path}")
        try:
            if httpx.get(server.url + "/ready", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    stop(server)
    raise RuntimeError(f"{server.name} not ready after {timeout_s:.0f} s; see {server.log_path}")


def stop(server: Server, timeout_s: float = 30.0) -> int | None:
    """SIGTERM, then SIGKILL if it has not exited within timeout_s. Returns the exit code."""
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
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


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


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


def service_argv(bundle: Path) -> list[str]:
    return [sys.executable, "-m", "attnserve", "serve", "--bundle", str(bundle), "--host", HOST, "--port", "{port}"]


def naive_argv(bundle: Path, variant: str) -> list[str]:
    return [sys.executable, "-m", "bench.naive_server", "--bundle", str(bundle), "--variant", variant,
            "--port", "{port}"]
