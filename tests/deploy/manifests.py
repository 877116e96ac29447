"""deploy/kubernetes as Kubernetes receives it: each overlay rendered by `kubectl kustomize`, and the parts of
the rendered objects that the tests compare with the service."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.procs import ROOT

KUBERNETES = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("cpu", "gpu", "keda")


def overlay_id(overlay: str) -> str:
    """A test id that is not "gpu": tests/conftest.py skips tests with a "gpu" keyword where CUDA is absent."""
    return f"overlays/{overlay}"


Obj = dict[str, Any]


@functools.cache
def render(overlay: str) -> tuple[Obj, ...]:
    """The objects `kubectl kustomize deploy/kubernetes/overlays/<overlay>` prints (what `kubectl apply -k` sends)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is needed to render deploy/kubernetes (it ships with these machines)")
    done = subprocess.run([kubectl, "kustomize", str(KUBERNETES / "overlays" / overlay)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def only(objects: tuple[Obj, ...], kind: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"{len(found)} objects of kind {kind}"
    return found[0]


def pod_spec(objects: tuple[Obj, ...]) -> Obj:
    return only(objects, "Deployment")["spec"]["template"]["spec"]


def container(objects: tuple[Obj, ...]) -> Obj:
    (main,) = pod_spec(objects)["containers"]
    return main


def init_container(objects: tuple[Obj, ...]) -> Obj:
    """The pod's one init container: `attnserve pull` of the ConfigMap's model into the models volume."""
    (pull,) = pod_spec(objects)["initContainers"]
    return pull


def served_model(objects: tuple[Obj, ...]) -> str:
    """The model name the attnserve-model ConfigMap holds (the one configurable value)."""
    return str(only(objects, "ConfigMap")["data"]["model"])


def env(objects: tuple[Obj, ...]) -> dict[str, str]:
    variables = container(objects).get("env", [])
    names = [v["name"] for v in variables]
    assert len(names) == len(set(names)), f"an environment variable is set twice: {names}"
    return {v["name"]: v["value"] for v in variables}


def probes(objects: tuple[Obj, ...]) -> dict[str, Obj]:
    main = container(objects)
    return {name: main[name] for name in ("startupProbe", "livenessProbe", "readinessProbe")}


def metric_names_in_files() -> set[str]:
    """Every attnserve_* name written anywhere under deploy/kubernetes (comments included) or in its guide."""
    files = [*sorted(KUBERNETES.rglob("*.yaml")), ROOT / "docs" / "kubernetes.md"]
    text = "\n".join(p.read_text() for p in files)
    return set(re.findall(r"\battnserve_[a-z0-9_]+", text))


def dockerfile_user() -> int:
    match = re.search(r"^USER (\d+)$", (ROOT / "Dockerfile").read_text(), re.M)
    assert match, "the Dockerfile has no numeric USER"
    return int(match.group(1))


def load_schema(path: Path) -> Obj:
    schema: Obj = yaml.safe_load(path.read_text())
    return schema
