"""The cpu overlay's containers as the pod runs them, on this machine. The serving container: its args and
environment (ATTNSERVE_* and the rest, nothing from the test's own environment) start a real `python -m attnserve
serve` on the tiny bundle (flags appended for the bundle path and a loopback port, as flags win), which answers,
drains on SIGTERM with exit status 0, and writes nothing into its home or working directory: on the pod's read-only
root filesystem only /tmp (an emptyDir) is writable. The init container then the serving one: its args and
environment run `python -m attnserve pull` (the export image's entry command) with the tiny checkpoint for the
ConfigMap's model and a folder for the models volume, and the serving container's args serve what it wrote.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.deploy.manifests import container, env, init_container, render
from tests.helpers.process import Server, free_port, terminate, wait_ready


def pod_command(bundle: Path, port: int) -> list[str]:
    """The pod's args, its bundle path (in the models volume) swapped for `bundle`, on loopback."""
    args = container(render("cpu"))["args"]
    at = args.index("--bundle")
    args = [*args[:at], "--bundle", str(bundle), *args[at + 2:]]
    return [sys.executable, "-m", "attnserve", "serve", *args, "--host", "127.0.0.1", "--port", str(port)]


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


def pull_command(model: Path, models: Path) -> list[str]:
    """The init container's args: `model` for the ConfigMap's name, the models volume (/models) at `models`."""
    args = [arg.replace("$(ATTNSERVE_MODEL)", str(model)).replace("/models", str(models), 1)
            for arg in init_container(render("cpu"))["args"]]
    return [sys.executable, "-m", "attnserve", "pull", *args]


@pytest.mark.slow  # an export of the tiny checkpoint
def test_the_init_step_writes_the_bundle_the_server_serves(tiny_checkpoint: Path, tmp_path: Path) -> None:
    home, work, tmp, models = (tmp_path / name for name in ("home", "work", "tmp", "models"))
    for folder in (home, work, tmp, models):
        folder.mkdir()
    pull = init_container(render("cpu"))
    # what the export image sets (Dockerfile.export ENV) and the init container adds, its /tmp moved to `tmp`
    variables = {"PATH": "/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(tmp), "PYTHONDONTWRITEBYTECODE": "1",
                 **{v["name"]: v["value"].replace("/tmp", str(tmp), 1) for v in pull["env"] if "value" in v}}
    done = subprocess.run(pull_command(tiny_checkpoint, models), cwd=work, env=variables, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    bundle = Path(done.stdout.split()[-1])  # pull prints the bundle's path last
    served = pod_command(bundle, free_port())
    assert bundle.parent == models and served[served.index("--bundle") + 1] == str(bundle)
    assert (list(home.iterdir()), list(work.iterdir())) == ([], [])
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(pod_command(bundle, port), cwd=work, env={**variables, **env(render("cpu"))},
                                stdout=out, stderr=subprocess.STDOUT)
        server = Server("pod", proc, port, log)
        try:
            assert wait_ready(server, 60), log.read_text()
            answer = httpx.post(f"{server.url}/embed", json={"inputs": ["one"]}, timeout=30)
            assert answer.status_code == 200 and len(answer.json()) == 1
        finally:
            terminate(server)
