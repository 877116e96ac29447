"""The exact variants' parity gate (export/parity.py) passes a real model's float32 rounding and still catches a wrong
graph. The rule: on real tokens, each output's max abs diff from eager PyTorch is at most 1e-5 x max(1, its largest
|reference| value), the attention probabilities' at most 1e-4.

Two random-weight BERTs, each exported once (the fast fp32 graph) and compared with its own eager reference on the
parity texts: the tests' small one (2 layers x 32) and one at BERT-base's depth and width (12 layers x 768, 12 heads)
with a trained model's magnitudes: weights and embeddings at sd 0.04, norm weights spread around 1 (sd 0.3), and
queries scaled up so that the scores reach tens as a trained model's do (here 13 to 30 per layer; all-mpnet-base-v2's
13 to 28), and its states reach about 6. Each passes, its figure shown within the gate; and each
of three broken copies misses the gate against the unbroken model's reference, on token_embeddings by 10x or more:
  position  two rows of the position table swapped (the tokens at positions 3 and 4 trade places),
  norm      the middle block's attention norm weight 1% off,
  mask      the last key always visible (each padded row sees one padding key): exported from the model with
            model.encoder.build_mask patched to let it through.
The position and norm copies are the exported graph with that one initializer edited, the graph a copy with those
weights exports, without a second 12-layer export. The real all-mpnet-base-v2 is tests/export/test_real_mpnet.py.
The module takes about 45 s on 2 cores (slow), most of it the base-sized model's two exports.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
import transformers
from onnx import numpy_helper
from torch import Tensor

import model.encoder
from export.graphs import export_graph
from export.parity import Batch, ParityError, check_graph, gate_failures, reference
from export.parity_texts import parity_batches
from model.attention import build_mask
from model.load import load_model
from tests.helpers import families, tokenizers

pytestmark = pytest.mark.slow
CPU = ["CPUExecutionProvider"]
MAX_LENGTH = 64  # both models' position limit: the parity texts are cut to it, so the long ones fill it
POSITION_TABLE = "encoder.embeddings.position.weight"


@dataclass
class Exported:
    graph: Path  # the fast fp32 graph
    leaky: Path  # the same model exported with the last key always visible
    batches: list[Batch]  # the unbroken model's eager outputs on two parity batches (3 and 8 texts, padded)
    layers: int


def save_base_sized(directory: Path) -> None:
    """A random BERT-base (12 x 768, 12 heads, FFN 3,072) at a trained model's magnitudes; a 300-word vocabulary."""
    tokenizer = tokenizers.wordpiece()
    config = transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=MAX_LENGTH,
                                     initializer_range=0.04)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        bert = transformers.BertModel(config)
        with torch.no_grad():
            for name, param in bert.named_parameters():
                if "LayerNorm.weight" in name:
                    param.add_(torch.randn_like(param) * 0.3)
                if "attention.self.query.weight" in name:
                    param.mul_(4.0)  # scores of 13 to 30 per layer instead of 3 to 7
    bert.save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))


def leaky_mask(attention_mask: Tensor, kind: str = "full", window: int = 0) -> Tensor:
    """build_mask with one bit wrong: the last key is visible to every query, padding or not."""
    mask = build_mask(attention_mask, kind, window)  # (B, 1, 1|T, T)
    last = torch.arange(attention_mask.size(1), device=mask.device) == attention_mask.size(1) - 1  # (T,)
    return mask | last


@pytest.fixture(scope="module", params=["small", "base-sized"])
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Exported:
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "small":
        families.save_hf(root / "source", "bert")
    else:
        save_base_sized(root / "source")
    loaded = load_model(root / "source")
    export_graph(loaded.encoder, "fast", root / "fast.onnx")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model.encoder, "build_mask", leaky_mask)
        export_graph(loaded.encoder, "fast", root / "leaky.onnx")
    batches = reference(loaded, parity_batches()[1:3], MAX_LENGTH, "fast")
    return Exported(root / "fast.onnx", root / "leaky.onnx", batches, loaded.encoder.config.num_layers)


def test_the_rule_scales_with_the_output() -> None:
    """2e-5 off a state of magnitude 40 is rounding; 2e-5 off values under 1 is not; probabilities get 1e-4."""
    assert not gate_failures("fp32", {"token_embeddings_max_abs_diff": 2e-5, "token_embeddings_max_abs": 40.0})
    assert gate_failures("fp32", {"token_embeddings_max_abs_diff": 2e-5, "token_embeddings_max_abs": 0.5}) == [
        "token_embeddings_max_abs_diff 2e-05 > 1e-05"]
    assert gate_failures("fp32", {"logits_max_abs_diff": 5e-4, "logits_max_abs": 40.0}) == [
        "logits_max_abs_diff 0.0005 > 0.0004"]
    assert not gate_failures("fp32-opt", {"attentions_max_abs_diff": 2.3e-5, "attentions_max_abs": 1.0})
    assert gate_failures("fp32", {"attentions_max_abs_diff": 2e-4, "attentions_max_abs": 1.0}) == [
        "attentions_max_abs_diff 0.0002 > 0.0001"]


def test_the_exported_graph_passes_within_the_gate(exported: Exported) -> None:
    measured = check_graph(exported.graph, "fp32", CPU, exported.batches)
    for output in ("embeddings", "token_embeddings"):
        diff, bound = measured[f"{output}_max_abs_diff"], 1e-5 * max(1.0, measured[f"{output}_max_abs"])
        assert 0 < diff <= bound, (output, diff, bound)
    if exported.layers == 2:  # the tests' small random models stay equal at 1e-5 outright
        assert measured["token_embeddings_max_abs_diff"] <= 1e-5, measured
    else:  # states of a trained model's size: the scale is what the gate holds them to
        assert measured["token_embeddings_max_abs"] > 3, measured


def edited(path: Path, out: Path, name: str, change: Callable[[np.ndarray], np.ndarray]) -> Path:
    """A copy of the graph at `path` with the initializer `name` changed."""
    graph = onnx.load(str(path))
    tensor = next(t for t in graph.graph.initializer if t.name == name)
    tensor.CopyFrom(numpy_helper.from_array(change(numpy_helper.to_array(tensor).copy()), tensor.name))
    onnx.save(graph, str(out))
    return out


def swap_rows(table: np.ndarray) -> np.ndarray:
    table[[3, 4]] = table[[4, 3]]
    return table


def broken_graph(exported: Exported, broken: str, tmp_path: Path) -> Path:
    if broken == "position":
        return edited(exported.graph, tmp_path / "broken.onnx", POSITION_TABLE, swap_rows)
    if broken == "norm":
        norm = f"encoder.blocks.{exported.layers // 2}.attn_norm.weight"
        return edited(exported.graph, tmp_path / "broken.onnx", norm, lambda weight: weight * 1.01)
    return exported.leaky


@pytest.mark.parametrize("broken", ["position", "norm", "mask"])
def test_a_broken_graph_misses_the_gate(exported: Exported, broken: str, tmp_path: Path) -> None:
    graph = broken_graph(exported, broken, tmp_path)
    with pytest.raises(ParityError) as missed:
        check_graph(graph, "fp32", CPU, exported.batches)
    found = re.search(r"token_embeddings_max_abs_diff ([-+.\de]+) > ([-+.\de]+)", str(missed.value))
    assert found is not None, str(missed.value)
    figure, bound = float(found[1]), float(found[2])
    assert figure >= 10 * bound, str(missed.value)
