"""The README and the docs are reference, not a lab notebook: no dates, times of day, run ids, load-average
figures, issue numbers or commit hashes (a figure stays with the command that reproduces it), and every
relative link leads to a file of the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The project's own: not the READMEs tools write into hidden folders (.pytest_cache, .venv) or node_modules.
DOCS = sorted(path for path in [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("*/README.md")]
              if not any(part.startswith(".") or part == "node_modules" for part in path.relative_to(ROOT).parts))
RUN_LOG = {
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "a time of day": re.compile(r"\b\d\d:\d\d(:\d\d)? ?(UTC|GMT)\b"),
    "a run id": re.compile(r"\b20\d{6}T\d{6}\b"),
    "a load-average figure": re.compile(r"load average[s]? (of |was |at )?\d", re.IGNORECASE),
    "an issue number": re.compile(r"(?<![\w/&])#\d{1,5}\b"),
    "a commit hash": re.compile(r"\bcommits? [0-9a-f]{7,40}\b"),
}
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_there_are_docs_to_check():
    assert len(DOCS) > 5 and ROOT / "docs" / "performance.md" in DOCS


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_run_logs(doc):
    text = doc.read_text()
    found = [f"{what}: {m.group(0)!r} (line {text.count(chr(10), 0, m.start()) + 1})"
             for what, pattern in RUN_LOG.items() for m in pattern.finditer(text)]
    assert not found, found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_files(doc):
    targets = [t.split("#")[0] for t in LINK.findall(doc.read_text())]
    missing = [t for t in targets if t and "://" not in t and not t.startswith("mailto:")
               and not (doc.parent / t).exists()]
    assert not missing, missing


def test_the_patterns_catch_what_they_name():
    examples = {"a date": "run on 2026-11-30", "a time of day": "from 03:06 UTC", "a run id": "run 20261201T175747",
                "a load-average figure": "load average 13.7", "an issue number": "see #21",
                "a commit hash": "(commit fbe5aaf)"}
    assert {what: bool(RUN_LOG[what].search(text)) for what, text in examples.items()} == dict.fromkeys(examples, True)
    assert not RUN_LOG["an issue number"].search("[the section](#which-graph-is-served) and &#38;")
