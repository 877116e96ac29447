"""The cpu overlay's container as the pod runs it, on this machine: its args and environment (ATTNSERVE_* and
the rest, nothing from the test's own environment) start a real `python -m attnserve serve` on the tiny
bundle (flags appended for the bundle path and a loopback port, as flags win), which answers, drains on
SIGTERM with exit status 0, and writes nothing into its home or working directory: on the pod's read-only
root filesystem only /tmp (an emptyDir) is writable.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from tests.deploy.manifests import container, env, render
from tests.helpers.process import Server, free_port, terminate, wait_ready


def pod_command(bundle: Path, port: int) -> list[str]:
    args = container(render("cpu"))["args"]
    return [sys.executable, "-m", "attnserve", "serve", *args, "--bundle", str(bundle), "--host", "127.0.0.1",
            "--port", str(port)]


def test_the_pods_configuration_serves_and_writes_nothing_outside_tmp(tiny_bundle: Path, tmp_path: Path) -> None:
    home, work, tmp = tmp_path / "home", tmp_path / "work", tmp_path / "tmp"
    for folder in (home, work, tmp):
        folder.mkdir()
    # what the image sets (Dockerfile ENV) and the pod adds; PATH only to find this machine's Python
    variables = {"PATH": "/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(tmp), "PYTHONDONTWRITEBYTECODE": "1",
                 "PYTHONUNBUFFERED": "1", **env(render("cpu"))}
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(pod_command(tiny_bundle, port), cwd=work, env=variables, stdout=out,
                                stderr=subprocess.STDOUT)
        server = Server("pod", proc, port, log)
        try:
            assert wait_ready(server, 60), log.read_text()
            answer = httpx.post(f"{server.url}/embed", json={"inputs": ["one", "two"]}, timeout=30)
            assert answer.status_code == 200 and len(answer.json()) == 2
        finally:
            status = terminate(server)
    assert status == 0, log.read_text()
    assert (list(home.iterdir()), list(work.iterdir())) == ([], []), log.read_text()
