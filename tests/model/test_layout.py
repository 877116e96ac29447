"""model/ has two halves: the encoder half at the top never imports model/training."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ENCODER_HALF = ("config", "attention", "positions", "layers", "pooling", "heads", "encoder", "tokenizer",
                "checkpoint", "families", "sentence", "hf", "load")


def test_the_encoder_half_does_not_import_training() -> None:
    imports = "; ".join(f"import model.{name}" for name in ENCODER_HALF)
    probe = f"import sys; {imports}; print(sorted(m for m in sys.modules if m.startswith('model.training')))"
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
