"""The Dockerfiles, checked without a Docker engine: hadolint, and the promises they make. Dockerfile: the serving
images (no torch); Dockerfile.export: the export image that runs `attnserve pull` (torch CPU)."""

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
EXPORT_DOCKERFILE = ROOT / "Dockerfile.export"


def _hadolint() -> str:
    path = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(path).exists():
        pytest.fail("hadolint is not installed; it is a dev dependency (make install)")
    return path


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, EXPORT_DOCKERFILE], ids=lambda path: path.name)
def test_hadolint_reports_nothing_above_info(dockerfile: Path) -> None:
    result = subprocess.run([_hadolint(), "--failure-threshold", "info", "--format", "json", str(dockerfile)],
                            capture_output=True, text=True)
    findings = json.loads(result.stdout or "[]")
    assert [f for f in findings if f["level"] in ("error", "warning", "info")] == []


def _instruction(name: str, dockerfile: Path = DOCKERFILE) -> list[str]:
    return re.findall(rf"^{name}\s+(.+)$", dockerfile.read_text(), flags=re.MULTILINE)


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


def _stages(dockerfile: Path = DOCKERFILE) -> list[str]:
    return re.split(r"^FROM\s", dockerfile.read_text(), flags=re.MULTILINE)[1:]


def test_runtime_stage_copies_the_venv_and_installs_nothing() -> None:
    """A builder stage pip-installs into /opt/venv; the runtime stage copies it and runs no pip (no build tools,
    no pip cache); every pip install in the builder leaves no cache."""
    builder, runtime = _stages()
    assert "pip install" in builder
    assert all("--no-cache-dir" in line for line in builder.splitlines() if "pip install" in line)
    assert "pip install" not in runtime and "COPY --from=builder /opt/venv /opt/venv" in runtime
    assert not re.search(r"\b(gcc|g\+\+|build-essential|python3-dev|python3-pip)\b", runtime)


# -- the export image --------------------------------------------------------------------------------------
def test_export_image_runs_pull_as_the_serving_images_user() -> None:
    assert json.loads(_instruction("ENTRYPOINT", EXPORT_DOCKERFILE)[-1]) == ["python", "-m", "attnserve", "pull"]
    assert _instruction("USER", EXPORT_DOCKERFILE)[-1] == _instruction("USER")[-1]  # its bundles are theirs to read


def test_export_image_pins_the_torch_the_makefile_installs() -> None:
    """torch first and alone, the Makefile's pin (and the train extra's), from the CPU index; the build fails if
    the torch it got was built for CUDA."""
    builder, runtime = _stages(EXPORT_DOCKERFILE)
    makefile = re.findall(r"pip install -q (torch==[\w.]+)", (ROOT / "Makefile").read_text())
    pins = re.findall(r"\b(torch==[\w.]+)", builder)
    assert makefile and set(pins) == set(makefile) and f'"{makefile[0]}"' in (ROOT / "pyproject.toml").read_text()
    assert "ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu" in builder
    assert "torch.version.cuda is not None" in builder
    first_pip = next(line for line in builder.splitlines() if "pip install" in line)
    assert "torch==" in first_pip


def test_export_requirements_are_the_cpu_images_plus_the_exporter() -> None:
    lines = [line for line in (ROOT / "deploy" / "requirements-export.txt").read_text().splitlines()
             if line and not line.startswith("#")]
    assert lines[0] == "-r requirements-cpu.txt"
    assert not [line for line in lines if line.startswith(("torch", "onnxruntime"))]  # torch apart, the CPU onnxruntime
    assert {line.split("==")[0] for line in lines[1:]} >= {"onnx", "onnxscript", "safetensors", "sentencepiece"}


def test_export_image_copies_the_export_side_and_installs_nothing_at_run_time() -> None:
    copied = {line.split()[0] for line in _instruction("COPY", EXPORT_DOCKERFILE) if not line.startswith("--")}
    assert {"attnserve", "bundle", "hub", "model", "export"} <= copied
    assert not copied & {"service", "inference", "jobs", "."}
    builder, runtime = _stages(EXPORT_DOCKERFILE)
    assert all("--no-cache-dir" in line for line in builder.splitlines() if "pip install" in line)
    assert "pip install" not in runtime and "COPY --from=builder /opt/venv /opt/venv" in runtime
