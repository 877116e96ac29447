"""A real `python -m attnserve serve` process (the Dockerfile's command) on 127.0.0.1 and a free port, for tests.

Thin over bench.procs (the one server-process helper: launch, wait_ready, one SIGTERM then a bounded wait,
SIGKILL only past it). Here: the test flags (one onnxruntime thread, since tests share two cores), no
ATTNSERVE_* variable from this environment, and a context manager that always stops the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.procs import Server, clean_env, free_port, launch, service_argv, sigterm, terminate, wait_ready

__all__ = ["Server", "free_port", "launch_server", "running", "sigterm", "stop", "terminate", "wait_ready"]


def launch_server(bundle: Path, log_path: Path, *flags: str) -> Server:
    """Start the server on `bundle` (does not wait for /ready); its output goes to `log_path`."""
    argv = service_argv(bundle, "--intra-op-threads", "1", *flags)
    return launch("attnserve", argv, log_path, clean_env())


@contextmanager
def running(bundle: Path, log_path: Path, *flags: str) -> Iterator[Server]:
    """A ready server for the body of the `with`; stopped on exit (one SIGTERM, a bounded wait)."""
    server = launch_server(bundle, log_path, *flags)
    try:
        assert wait_ready(server, 60), f"server not ready (exit status {server.proc.poll()}):\n{server.log()}"
        yield server
    finally:
        terminate(server)


def stop(server: Server, timeout_s: float = 30.0) -> tuple[int, str]:
    """Stop the server (one SIGTERM unless already sent, SIGKILL past `timeout_s`): (exit status, its log)."""
    return terminate(server, timeout_s), server.log()
