"""The inference core's move into rooms and its one owner per request rule changed no answer: /embed,
/v1/embeddings and `attnserve embed` give bit-equal vectors at this tree and at BEFORE, the commit before the
move, over a grid of prompts, LoRA adapters (tasks) and chunking settings (tests/helpers/answers_grid.py), on
bundles BEFORE's code exported (schema 3, which this tree still reads). BEFORE's tree comes from this clone's
history (`git archive`); minutes of export and two servers, so `heavy` (make reliability)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.heavy
ROOT = Path(__file__).resolve().parents[2]
BEFORE = "0fb4d9d"  # the last commit before inference/ moved into rooms
GRID = ROOT / "tests" / "helpers" / "answers_grid.py"


def grid_run(tree: Path, work: Path, name: str) -> dict[str, dict[str, str]]:
    """answers_grid.py's answers under the code of `tree` (PYTHONPATH), written to work/NAME.json."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # -P: the script's own folder (tests/helpers, whose tokenizers.py would hide the library) stays off sys.path
    subprocess.run([sys.executable, "-P", str(GRID), str(work), name], cwd=tree, env=env, check=True, timeout=1800)
    return json.loads((work / f"{name}.json").read_text())  # type: ignore[no-any-return]


def test_answers_are_bit_equal_to_the_commit_before_the_rooms(tmp_path: Path) -> None:
    archive = tmp_path / "before.tar"
    subprocess.run(["git", "archive", "-o", str(archive), BEFORE], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "before", filter="data")
    work = tmp_path / "work"
    work.mkdir()
    before = grid_run(tmp_path / "before", work, "before")  # exports the bundles with BEFORE's code
    assert json.loads((work / "jina-bundle" / "manifest.json").read_text())["schema_version"] == 3  # BEFORE's
    after = grid_run(ROOT, work, "after")
    assert before.keys() == after.keys() and all(len(answers) > 4 for answers in before.values())
    for model, answers in before.items():
        differ = [key for key, answer in answers.items() if after[model].get(key) != answer]
        assert differ == [], f"{model}: {len(differ)} of {len(answers)} answers differ, e.g. {differ[:2]}"
    statuses = {json.loads(answer)[0] for model in ("jina", "mpnet") for answer in before[model].values()}
    assert statuses == {200}
