"""Schema fuzzing: `schemathesis run --checks all` against real servers, with the document each one serves.

The OpenAPI document a server publishes is made from the models it serves (service/openapi.py): their
sizes bound `dimensions`, layer and head indices, token ids and `chunk_overlap`, the settings bound the
inputs per request, and routes no served model can answer are left out (they answer 404). schemathesis'
CLI then runs every phase (examples, coverage, fuzzing, stateful), positive and negative data, and every
check it has plus the two of tests/reliability/fuzz/hooks.py (the error bodies; positive data accepted
unless a 422 names a limit no document can state), configured in tests/reliability/fuzz/schemathesis.toml.
Nothing may be found: no 5xx, no undocumented status, content type or header, no schema-valid request
refused, no schema-violating request accepted.

Three servers: one model with a classification head and an attention graph, an embedding-only one with
prompts (a sentence-transformers MPNet model, tests/helpers/exports.py: `prompt_name` is bound to its prompts,
`chunk_overlap` to its window less its longest prompt), and a cross-encoder (the rerank and score routes;
tests/helpers/heads.py). In CI the first serves the tiny test bundle and generation is deterministic (a
failure reproduces), 8 examples an operation; `make reliability` (ATTNSERVE_RELIABILITY_FULL=1) fuzzes the
default bundle and the embedding-only one with 300 random examples an operation.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.process import running
from tests.reliability import FULL

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "reliability" / "fuzz" / "schemathesis.toml"
EXAMPLES = 300 if FULL else 8
DEFAULT_BUNDLE = ROOT / "bundles" / "default"


def schemathesis_run(url: str, report: Path) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG), "run", f"{url}/openapi.json",
        "--checks", "all", "--exclude-checks", "positive_data_acceptance",  # replaced by the hooks' version
        "--max-examples", str(EXAMPLES), "--no-color", "--report", "junit", "--report-junit-path", str(report),
        *([] if FULL else ["--generation-deterministic"]),
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.reliability.fuzz.hooks", "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


@pytest.mark.parametrize("served", ["with_head", "embedding_only", "cross_encoder"])
def test_schemathesis_finds_nothing(served: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if served == "with_head":
        bundle = DEFAULT_BUNDLE if FULL else request.getfixturevalue("tiny_bundle")
    elif served == "cross_encoder":  # the rerank routes (TEI, Cohere/Jina, vLLM) and pairs on /predict
        bundle = request.getfixturevalue("head_bundles")["bert-ce"].bundle
    else:
        bundle = request.getfixturevalue("family_export")("mpnet-sentence").bundle
    with running(bundle, tmp_path / "server.log", "--max-inputs", "32") as server:
        result = schemathesis_run(server.url, tmp_path / "junit.xml")
    summary = result.stdout[-6000:]
    assert result.returncode == 0, summary + result.stderr[-2000:]
    assert "No issues found" in summary or " passed" in summary, summary
