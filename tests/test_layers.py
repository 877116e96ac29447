"""The layers load only what they may, checked in fresh processes: `model <- export -> bundle <- inference <-
service, jobs, bench`, with hub/ (models by name) between bundle/ and service/. No torch (nor model/ or export/) in
bundle/, hub/, inference/, service/, jobs/ or the command line's own modules (the Docker image carries none of them);
no HTTP framework, server or HTTP settings in inference/ or hub/, and no inference core in hub/; no service/ in jobs/
or bench/."""

from __future__ import annotations

import ast
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
        "from inference.runtime.loading import load_bundle\nfrom inference.options import LoadOptions\n"
        f"load_bundle({str(tiny_bundle)!r}, LoadOptions())\n"
    )
    assert loaded_after(code, HTTP_SIDE + TORCH_SIDE) == []


def test_the_server_and_the_jobs_import_no_torch(tiny_bundle: Path) -> None:
    code = import_all("bundle", "hub", "inference", "service", "jobs") + (
        "import attnserve.cli, attnserve.flags, attnserve.pull\n"  # not attnserve.__main__, which runs the CLI
        "from inference.registry import load_bundles, ServedBundle\nfrom inference.options import LoadOptions\n"
        "from service.app import create_app\nfrom service.settings import Settings\n"
        f"loaded = load_bundles([ServedBundle(path={str(tiny_bundle)!r})], LoadOptions())\n"
        "create_app(Settings(bundle='x'), loaded)\n"
    )
    assert loaded_after(code, TORCH_SIDE) == []


def test_models_by_name_import_no_torch_no_http_and_no_core() -> None:
    assert loaded_after(import_all("hub"), TORCH_SIDE + HTTP_SIDE + ("inference",)) == []


@pytest.mark.parametrize("package", ["jobs", "bench"])
def test_jobs_and_bench_use_the_core_not_the_http_front(package: str) -> None:
    assert loaded_after(import_all(package), ("service",)) == []


# The core's floors, lowest first: a module imports only from its own floor or below. runtime/ loads a bundle and
# runs a graph; scheduling/ admits, queues, batches and reuses answers; tasks/ is what a request asks for.
CORE_FLOORS = (
    ("ground", ("inference.errors", "inference.options", "inference.results", "inference.postprocess",
                "inference.quantize")),
    ("runtime", ("inference.runtime",)),
    ("request rules", ("inference.chunking", "inference.prompts", "inference.limits", "inference.rules")),
    ("scheduling", ("inference.scheduling",)),
    ("served models", ("inference.served", "inference.registry")),
    ("tasks", ("inference.tasks",)),
)


def core_floor(module: str) -> int:
    """The floor of a module of inference/ (a room's modules share their room's floor)."""
    for index, (_, prefixes) in enumerate(CORE_FLOORS):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
            return index
    raise AssertionError(f"{module} is on no floor of CORE_FLOORS: place it there")


def core_imports(path: Path) -> set[str]:
    """The inference modules `path` imports (`from inference import x` names module inference.x)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "inference":
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                is_module = (ROOT / (candidate.replace(".", "/") + ".py")).exists()
                found.add(candidate if is_module else node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "inference"}
    return {module for module in found if module != "inference" and not module.endswith("__init__")}


def test_the_core_rooms_import_nothing_from_a_floor_above() -> None:
    upward = []
    for path in sorted((ROOT / "inference").rglob("*.py")):
        if path.name == "__init__.py":
            continue
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for imported in core_imports(path):
            if core_floor(imported) > core_floor(module):
                upward.append(f"{module} ({CORE_FLOORS[core_floor(module)][0]}) imports {imported} "
                              f"({CORE_FLOORS[core_floor(imported)][0]})")
    assert upward == []


def test_the_floor_check_reads_both_forms_of_import(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text("from inference import served, errors\nfrom inference.tasks.embed import embed\n"
                      "import inference.runtime.graphs\n")
    assert core_imports(source) == {"inference.served", "inference.errors", "inference.tasks.embed",
                                    "inference.runtime.graphs"}
    assert core_floor("inference.tasks.embed") > core_floor("inference.served") > core_floor("inference.runtime.graphs")
