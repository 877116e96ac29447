"""bench.lengths' own arithmetic (no timing is asserted): the peak an input costs on top of the loaded model,
the table's ratios, that a word-level tokenizer makes a text of exactly the asked number of tokens, and which graph
bench.peak runs (--maps: the attention graph for the chosen maps)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench import lengths, peak
from bench.longmodel import word_level_tokenizer
from bench.texts import make_text
from bundle.manifest import Manifest
from bundle.session import open_session
from tests.helpers.exports import Exported

PEAK_SCRIPT = """
import json
import numpy as np
from bench import peak
loaded = np.ones(64 * 2**20, dtype=np.uint8)  # 64 MB resident before the runs
def run(_):
    return float(np.ones(128 * 2**20, dtype=np.uint8).sum())  # 128 MB, freed after each run
print(json.dumps(peak.measure(run, np.zeros((1, 4), dtype=np.int64), repeats=2)))
"""


def test_the_peak_counts_what_the_runs_allocate_not_what_was_loaded() -> None:
    """In a fresh process, as `python -m bench.peak` runs: a long-lived one (a test worker) may hand the runs heap
    pages that an earlier test left resident, which no resident-set figure can tell from the loaded model's."""
    result = subprocess.run([sys.executable, "-c", PEAK_SCRIPT], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).resolve().parents[1])
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert 120 <= figures["peak_mb"] < 128 + 40 and figures["loaded_mb"] >= 64
    assert figures["wall_ms"] > 0 and figures["cpu_ms"] >= 0


def test_the_table_gives_ours_over_the_reference_and_marks_a_failed_point() -> None:
    points = [
        {"side": "ours", "tokens": 512, "wall_ms": 100.0, "cpu_ms": 180.0, "loaded_mb": 1000.0, "peak_mb": 50.0,
         "max_abs_diff": 3.2e-6},
        {"side": "reference", "tokens": 512, "wall_ms": 400.0, "cpu_ms": 700.0, "loaded_mb": 900.0, "peak_mb": 200.0},
        {"side": "ours", "tokens": 8192, "wall_ms": 9000.0, "cpu_ms": 17000.0, "loaded_mb": 1000.0, "peak_mb": 3000.0},
        {"side": "reference", "tokens": 8192, "error": "exit -9: killed"},
    ]
    rows = lengths.table(points).splitlines()[2:]
    assert rows[0] == "| 512 | 100 (180) | 50 (1,050) | 400 (700) | 200 (1,100) | 0.25x | 0.25x | 3.2e-06 |"
    assert rows[1] == "| 8,192 | 9,000 (17,000) | 3,000 (4,000) | failed | failed | - | - | - |"


def test_a_text_of_n_words_is_n_plus_two_tokens() -> None:
    tokenizer = word_level_tokenizer()
    for tokens in (3, 512, 2048):
        assert len(tokenizer.encode(make_text(tokenizer, tokens, seed=tokens)).ids) == tokens


def test_peak_runs_the_attention_graph_for_the_maps_asked_for(family_export: Callable[[str], Exported]) -> None:
    """--maps 1:0,2 runs the attention graph fed layer 1 and heads 0 and 2: the (l, h, T, T) maps of the first row,
    those of every map the graph computes unfed; without it, the fast graph's (T, D) token states."""
    bundle = family_export("modernbert-classifier").bundle
    manifest = Manifest.read(bundle)
    ids = np.array([[1, 5, 6, 7, 8, 2]], dtype=np.int64)
    chosen = peak.ours(bundle, manifest, 1, peak.maps_choice("1:0,2"))(ids)
    session = open_session(bundle / "attention-fp32.onnx")
    every = session.run(["attentions"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0][0]  # (L, H, T, T)
    assert chosen.shape == (1, 2, 6, 6)
    assert np.abs(chosen - every[[1]][:, [0, 2]]).max() <= 1e-6
    assert peak.ours(bundle, manifest, 1)(ids).shape == (6, manifest.hidden_size)
