"""model/ has two halves: the encoder half at the top never imports model/training; and the encoder's primitives
(model/lora.py) never import the encoder back."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ENCODER_HALF = ("config", "attention", "positions", "layers", "pooling", "heads", "encoder", "tokenizer",
                "checkpoint", "families", "sentence", "hf", "load", "layouts", "peft", "adapters", "lm_scorer")


def test_the_encoder_half_does_not_import_training() -> None:
    imports = "; ".join(f"import model.{name}" for name in ENCODER_HALF)
    assert _loaded(imports, "model.training") == "[]"


def test_the_lora_primitives_do_not_import_the_encoder() -> None:
    """Every import in model/lora.py, at any depth, is of a primitive (the config and its rules)."""
    tree = ast.parse((Path(__file__).resolve().parents[2] / "model" / "lora.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert {name for name in imported if name and name.startswith("model")} == {"model.config", "model.config_rules"}
    assert _loaded("import model.lora", "model.encoder") == "[]"


def _loaded(imports: str, prefix: str) -> str:
    """The modules under `prefix` that a fresh interpreter has loaded after `imports`, as a sorted list."""
    probe = f"import sys; {imports}; print(sorted(m for m in sys.modules if m.startswith({prefix!r})))"
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, check=True)
    return result.stdout.strip()
