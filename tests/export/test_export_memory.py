"""A deep model exports within the stated memory budget (export.parity.MEMORY_BUDGET_*: a multiple of the fp32
weights plus a constant; docs/export.md, large models).

The export runs in a fresh process (export_bundle, the fp32 fast and attention graphs, parity and speed figures
included), which reports its own peak resident set (VmHWM, /proc/self/status) when done; the test
holds that peak to the budget. Not resource.setrlimit(RLIMIT_AS): it limits virtual address space, and torch and
onnxruntime reserve far more of it (thread stacks, arenas, mapped libraries) than they ever make resident, so a
limit derived from the budget would fail an export that stays inside it.

The model: a random-weight ModernBERT 12 layers deep, 2 heads of 64, positions to 512 (the parity texts' longest
is cut there), so the references and maps it holds are those of a deep model, its weights small: the constant is
what is tested at depth.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from export.parity import MEMORY_BUDGET_BYTES, MEMORY_BUDGET_WEIGHTS
from tests.helpers.families import save_hf

pytestmark = pytest.mark.heavy  # a limit check of a minute and a half: make reliability runs it
ROOT = Path(__file__).resolve().parents[2]
DEEP = dict(num_hidden_layers=12, hidden_size=128, num_attention_heads=2, intermediate_size=256,
            max_position_embeddings=512, local_attention=16)
CHILD = """
import json, sys
from pathlib import Path
from export import measure
from export.bundle import export_bundle
measure.SPEED_SECONDS_PER_SHAPE = 0.0  # five rounds a speed shape, as the suite's exports (tests/conftest.py)
manifest = export_bundle(Path(sys.argv[1]), Path(sys.argv[2]), variants=("fp32",))
status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
print(json.dumps({"peak_kb": int(status["VmHWM"].split()[0]), "max_length": manifest.max_length,
                  "layers": manifest.num_layers, "graphs": [g.file for g in manifest.graphs]}))
"""


def weight_bytes(source: Path) -> int:
    """The fp32 weights' bytes: the safetensors file, less its header."""
    data = (source / "model.safetensors").read_bytes()
    return len(data) - 8 - int.from_bytes(data[:8], "little")


def test_a_deep_model_exports_within_the_budget(tmp_path: Path) -> None:
    save_hf(tmp_path / "source", "modernbert", **DEEP)
    weights = weight_bytes(tmp_path / "source")
    budget = MEMORY_BUDGET_WEIGHTS * weights + MEMORY_BUDGET_BYTES
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "source"), str(tmp_path / "bundle")],
                         cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["layers"] == 12 and result["max_length"] == 512
    assert {"fast-fp32.onnx", "attention-fp32.onnx"} <= set(result["graphs"])
    peak = result["peak_kb"] * 1024
    assert peak <= budget, (f"export peaked at {peak / 2**20:.0f} MiB, over the budget {budget / 2**20:.0f} MiB "
                            f"({MEMORY_BUDGET_WEIGHTS} x {weights / 2**20:.1f} MiB of weights + "
                            f"{MEMORY_BUDGET_BYTES / 2**20:.0f} MiB)")
