"""A real `python -m attnserve serve` process (the Dockerfile's command) on 127.0.0.1 and a free port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

import httpx

ROOT = Path(__file__).resolve().parents[2]
_LOGS: dict[int, IO[bytes]] = {}  # pid -> the server's log file


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_command(bundle: Path, port: int, *flags: str) -> list[str]:
    """The Dockerfile's entry command, on loopback, one ORT thread (tests share two cores)."""
    return [sys.executable, "-m", "attnserve", "serve", "--bundle", str(bundle), "--host", "127.0.0.1",
            "--port", str(port), "--intra-op-threads", "1", *flags]


def server_env() -> dict[str, str]:
    """This environment without ATTNSERVE_* variables, so only the flags configure the server."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}


def launch(bundle: Path, *flags: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start the server (no ATTNSERVE_* from this environment leaks in); returns (process, base url)."""
    port = free_port()
    env, command = server_env(), serve_command(bundle, port, *flags)
    # The log goes to a file, not a pipe: nobody reads a pipe while the server runs, and a full pipe
    # (64 KiB of access log lines) would block the server's next write, and so the server.
    log = tempfile.TemporaryFile()  # noqa: SIM115  (open while the server runs; closed by stop())
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    _LOGS[proc.pid] = log
    return proc, f"http://127.0.0.1:{port}"


def wait_ready(proc: subprocess.Popen[bytes], url: str, timeout_s: float = 60) -> bool:
    """True once /ready answers 200; False when the process exits or the timeout passes first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    return False


def terminate(proc: subprocess.Popen[bytes], timeout_s: float = 30) -> int:
    """SIGTERM (graceful drain), a bounded wait, SIGKILL past it; returns the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return proc.returncode


def stop(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    """SIGTERM, wait, and return (exit status, everything the process logged)."""
    terminate(proc)
    log = _LOGS.pop(proc.pid)
    log.seek(0)
    output = log.read()
    log.close()
    return proc.returncode, output.decode(errors="replace")
