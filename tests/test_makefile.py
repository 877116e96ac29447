"""The README's two commands, as make plans them on a fresh clone (`make -n`, nothing run): `make serve`
installs only into the virtual environment and only what serving and building the default bundle need;
`make test` runs exactly the lint and the suite, and is what CI runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def planned(target: str, tmp_path: Path, *variables: str) -> str:
    """The commands `make -n target` would run from a fresh state (a virtual environment and bundle that do
    not exist yet), with `variables` (NAME=VALUE) set too."""
    result = subprocess.run(
        ["make", "-n", target, f"VENV={tmp_path / 'venv'}", f"BUNDLE={tmp_path / 'bundle'}",
         f"CHECKPOINT={tmp_path / 'checkpoint'}", "CHROMIUM=/nonexistent/chromium",
         f"NODE_STAMP={tmp_path / 'node' / '.installed'}", *variables],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_serve_installs_inside_the_venv_only_what_serving_needs(tmp_path: Path) -> None:
    plan = planned("serve", tmp_path)
    assert "apt-get" not in plan and "npm" not in plan and "sudo" not in plan
    installs = [line for line in plan.splitlines() if "pip install" in line]
    assert installs and all(line.split()[0].startswith(str(tmp_path / "venv")) for line in installs), installs
    assert not any("dev" in line or "ray" in line for line in installs), installs
    assert "torch==2.13.0" in installs[1]  # pinned, and before the project pulls any torch in
    assert "attnserve train" in plan and "attnserve export" in plan and "attnserve serve" in plan


def test_make_serve_model_serves_a_model_by_name_and_builds_no_bundle(tmp_path: Path) -> None:
    plan = planned("serve", tmp_path, "MODEL=BAAI/bge-small-en-v1.5")
    assert "attnserve train" not in plan and "attnserve export" not in plan
    assert "attnserve serve --model BAAI/bge-small-en-v1.5 --host" in plan and "--bundle" not in plan


def test_make_test_is_ci_and_runs_the_lints_and_the_suite(tmp_path: Path) -> None:
    plan = planned("test", tmp_path)
    assert "apt-get" in plan  # Chromium for the browser tests, when it is missing
    for step in ("npm ci", "eslint service/static", "tsc -p jsconfig.json", "ruff check", "vermin", "mypy",
                 "-m pytest"):
        assert step in plan, step
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_make_bench_minilm_benches_the_real_minilm_from_its_wheel(tmp_path: Path) -> None:
    plan = planned("bench-minilm", tmp_path, f"MINILM_BUNDLE={tmp_path / 'minilm'}").replace("\\\n", " ")
    export = next(line for line in plan.splitlines() if "attnserve export" in line)
    assert "minilm_dir()" in export and f"--out {tmp_path / 'minilm'}" in export
    assert "--variants fp32,fp32-opt" in export
    assert "attnserve train" not in plan  # no trained head: the model as a user serves it
    assert f"-m bench --bundle {tmp_path / 'minilm'}" in plan  # make bench, run by the recursive make
    assert "bench.large_export" not in plan  # the export phase is make bench's own, not the MiniLM run's
