"""The Dockerfile, checked without a Docker engine: hadolint, and the promises it makes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"


def _hadolint() -> str:
    path = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(path).exists():
        pytest.fail("hadolint is not installed; it is a dev dependency (make install)")
    return path


def test_hadolint_reports_nothing_above_info() -> None:
    result = subprocess.run([_hadolint(), "--failure-threshold", "info", "--format", "json", str(DOCKERFILE)],
                            capture_output=True, text=True)
    findings = json.loads(result.stdout or "[]")
    assert [f for f in findings if f["level"] in ("error", "warning", "info")] == []


def _instruction(name: str) -> list[str]:
    return re.findall(rf"^{name}\s+(.+)$", DOCKERFILE.read_text(), flags=re.MULTILINE)


def test_image_runs_as_non_root() -> None:
    users = _instruction("USER")
    assert users and users[-1].strip() not in ("root", "0")


def test_entry_command_is_the_one_the_tests_start() -> None:
    entry = json.loads(_instruction("ENTRYPOINT")[-1])
    assert entry == ["python", "-m", "attnserve", "serve"]
    cmd = json.loads(_instruction("CMD")[-1])
    assert cmd[:2] == ["--bundle", "/bundle"]


def test_healthcheck_probes_ready() -> None:
    assert "/ready" in DOCKERFILE.read_text().split("HEALTHCHECK", 1)[1].split("\n\n", 1)[0]


# The GPU image takes CUDA and cuDNN from the Python registry (onnxruntime-gpu's extras): no CUDA base image.
@pytest.mark.parametrize("flavour,runtime", [("cpu", "onnxruntime=="), ("gpu", "onnxruntime-gpu[cuda,cudnn]==")])
def test_image_requirements_carry_one_onnxruntime_and_no_torch(flavour: str, runtime: str) -> None:
    lines = [line for line in (ROOT / "deploy" / f"requirements-{flavour}.txt").read_text().splitlines()
             if line and not line.startswith("#")]
    runtimes = [line for line in lines if line.startswith("onnxruntime")]
    assert len(runtimes) == 1 and runtimes[0].startswith(runtime)
    assert not [line for line in lines if line.startswith("torch")]


def test_image_copies_the_service_side_only() -> None:
    """The image serves bundles and runs embed jobs: the CLI, the bundle contract, models by name, the service and
    jobs; never model/ or export/ (torch)."""
    copied = {line.split()[0] for line in _instruction("COPY") if not line.startswith("--")}
    assert {"attnserve", "bundle", "hub", "service", "jobs"} <= copied
    assert not copied & {"model", "export", "."}


def _stages() -> list[str]:
    return re.split(r"^FROM\s", DOCKERFILE.read_text(), flags=re.MULTILINE)[1:]


def test_runtime_stage_copies_the_venv_and_installs_nothing() -> None:
    """A builder stage pip-installs into /opt/venv; the runtime stage copies it and runs no pip (no build tools,
    no pip cache); every pip install in the builder leaves no cache."""
    builder, runtime = _stages()
    assert "pip install" in builder
    assert all("--no-cache-dir" in line for line in builder.splitlines() if "pip install" in line)
    assert "pip install" not in runtime and "COPY --from=builder /opt/venv /opt/venv" in runtime
    assert not re.search(r"\b(gcc|g\+\+|build-essential|python3-dev|python3-pip)\b", runtime)
