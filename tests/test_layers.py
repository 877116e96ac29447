"""The layers load only what they may, checked in fresh processes: `model <- export -> bundle <- inference <-
service, jobs, bench`. No torch (nor model/ or export/) in bundle/, inference/, service/ or jobs/ (the Docker
image carries none of them); no HTTP framework, server or HTTP settings in inference/; no service/ in jobs/ or
bench/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TORCH_SIDE = ("torch", "model", "export")
HTTP_SIDE = ("fastapi", "starlette", "uvicorn", "service")


def loaded_after(code: str, packages: tuple[str, ...]) -> list[str]:
    """Run `code` in a fresh interpreter; the modules of `packages` it left in sys.modules."""
    probe = code + f"\nimport sys\nprint(sorted({{m.split('.')[0] for m in sys.modules}} & {set(packages)!r}))\n"
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return eval(result.stdout.strip().splitlines()[-1])  # a printed list of names


def import_all(*packages: str) -> str:
    """Code importing every module of `packages`."""
    return ("import importlib, pkgutil\n" + "".join(f"import {p}\n" for p in packages) +
            f"for package in ({', '.join(packages)},):\n"
            "    for info in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
            "        importlib.import_module(info.name)\n")


def test_the_core_imports_no_http_and_no_torch(tiny_bundle: Path) -> None:
    code = import_all("bundle", "inference") + (
        "from inference.loading import load_bundle\nfrom inference.options import LoadOptions\n"
        f"load_bundle({str(tiny_bundle)!r}, LoadOptions())\n"
    )
    assert loaded_after(code, HTTP_SIDE + TORCH_SIDE) == []


def test_the_server_and_the_jobs_import_no_torch(tiny_bundle: Path) -> None:
    code = import_all("bundle", "inference", "service", "jobs") + (
        "from inference.registry import load_bundles, ServedBundle\nfrom inference.options import LoadOptions\n"
        "from service.app import create_app\nfrom service.settings import Settings\n"
        f"loaded = load_bundles([ServedBundle(path={str(tiny_bundle)!r})], LoadOptions())\n"
        "create_app(Settings(bundle='x'), loaded)\n"
    )
    assert loaded_after(code, TORCH_SIDE) == []


@pytest.mark.parametrize("package", ["jobs", "bench"])
def test_jobs_and_bench_use_the_core_not_the_http_front(package: str) -> None:
    assert loaded_after(import_all(package), ("service",)) == []
