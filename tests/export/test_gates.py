"""The exact variants' parity gate (export/gates.py) passes a real model's float32 rounding and still catches a wrong
graph. The rule: on the float64 texts, each output's max abs error against a float64 run of the same eager model (on
real tokens) is at most 8 x the error eager float32 PyTorch makes there, plus 1e-6 x max(1, the output's largest
|float64 value|); the attention probabilities get the same rule.

Two random-weight BERTs, each exported once (the fast fp32 graph) and compared with its own float64 reference on two
parity batches (3 and 8 texts, padded): the tests' small one (2 layers x 32) and one at BERT-base's depth and width
(12 layers x 768, 12 heads) with a trained model's magnitudes: weights and embeddings at sd 0.04, norm weights spread
around 1 (sd 0.3), and queries scaled up so that the scores reach tens as a trained model's do (here 13 to 30 per
layer; all-mpnet-base-v2's 13 to 28), and its states reach about 7. Each passes, its figure shown within the gate
(token_embeddings 1.0e-6 from float64 against a limit of 1.1e-5 for the small one, eager float32's own error 8.4e-7;
1.2e-5 against 8.3e-5 for the base-sized one, eager's 9.5e-6); and each of three broken copies misses the gate
against the unbroken model's float64 reference, on token_embeddings by 10x or more (small, base-sized):
  position  two rows of the position table swapped (the tokens at positions 3 and 4 trade places): 155,000x, 23,000x
  norm      the middle block's attention norm weight 1% off: 300x, 157x
  mask      the last key always visible (each padded row sees one padding key), exported from the model with
            model.encoder.build_mask patched to let it through: 675x, 21,700x.
The position and norm copies are the exported graph with that one initializer edited, the graph a copy with those
weights exports, without a second 12-layer export. The mistakes of other families (a LayerNorm eps, gate and up
swapped, a rotary base, a query norm left out, padding attended) are tests/export/test_gate_mistakes.py; the real
all-mpnet-base-v2 is tests/export/test_real_mpnet.py.
The base-sized model's two exports take about 90 s on 2 cores, so its cases are the heavy tier's (make reliability);
the small one's run in make test.
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
from export.gates import gate_failures
from export.graphs import export_graph
from export.parity import ParityError, check_graph
from export.parity_texts import parity_batches
from export.references import Batch, References, reference
from export.rounding import Rounding, float64_references
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
    rounding: Rounding  # its float64 outputs on the same texts, and eager float32's error against them
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


@pytest.fixture(scope="module", params=["small", pytest.param("base-sized", marks=pytest.mark.heavy)])
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
    texts = parity_batches()[1:3]
    rounding = float64_references({"fast": References(loaded, texts, MAX_LENGTH, "fast")})["fast"]
    batches = reference(loaded, texts, MAX_LENGTH, "fast")
    return Exported(root / "fast.onnx", root / "leaky.onnx", batches, rounding, loaded.encoder.config.num_layers)


def float64_figures(error: float, eager: float, scale: float, output: str = "token_embeddings") -> dict[str, float]:
    """An output's exact-gate figures: its error from float64, eager float32's, its scale."""
    return {f"{output}_float64_error": error, f"{output}_float64_eager_error": eager,
            f"{output}_float64_max_abs": scale}


def test_the_limit_is_a_multiple_of_float32s_own_error() -> None:
    """8e-5 from float64 passes beside eager float32's 1e-5, or beside 5e-6 on an output of magnitude 50 (the floor,
    1e-6 x 50, adds the rest); beside 5e-6 on an output under 1 it misses. Probabilities get the same rule; no float64
    figures is a miss, not a pass; fp16 keeps its cosine."""
    assert not gate_failures("fp32", float64_figures(8e-5, 1e-5, 0.5))
    assert not gate_failures("fp32", float64_figures(8e-5, 5e-6, 50.0))
    assert gate_failures("fp32", float64_figures(8e-5, 5e-6, 0.5)) == [
        "token_embeddings_float64_error 8e-05 > 4.1e-05 (8 x eager float32's 5e-06 + 1e-06 x 1)"]
    assert gate_failures("fp32-opt", float64_figures(2e-6, 0.0, 1.0, "attentions")) == [
        "attentions_float64_error 2e-06 > 1e-06 (8 x eager float32's 0 + 1e-06 x 1)"]
    assert gate_failures("fp32", {"token_embeddings_max_abs_diff": 0.0, "token_embeddings_max_abs": 1.0}) == [
        "no float64 figures (the exact gate compares with a float64 run of the model: export.rounding)"]
    assert gate_failures("fp16", {"embeddings_min_cosine": 0.998}) == ["embeddings_min_cosine 0.998 < 0.999"]


def test_the_exported_graph_passes_within_the_gate(exported: Exported) -> None:
    """The graph is as far from float64 as eager float32 is, give or take: within 8 x its error."""
    measured = check_graph(exported.graph, "fp32", CPU, exported.batches, exported.rounding)
    for output in ("embeddings", "token_embeddings"):
        error, eager = measured[f"{output}_float64_error"], measured[f"{output}_float64_eager_error"]
        assert 0 < error <= measured[f"{output}_float64_limit"] and eager > 0, (output, measured)
        assert measured[f"{output}_max_abs_diff"] > 0  # the diffs from eager float32, reported beside
    if exported.layers == 12:  # states of a trained model's size: the floor's scale
        assert measured["token_embeddings_float64_max_abs"] > 3, measured


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
        check_graph(graph, "fp32", CPU, exported.batches, exported.rounding)
    found = re.search(r"token_embeddings_float64_error ([-+.\de]+) > ([-+.\de]+)", str(missed.value))
    assert found is not None, str(missed.value)
    figure, bound = float(found[1]), float(found[2])
    assert figure >= 10 * bound, str(missed.value)
