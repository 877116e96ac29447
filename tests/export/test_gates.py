"""The exact variants' parity gate (export/parity.py): it passes a real model's float32 rounding and still catches a
wrong graph. The rule: each output's max abs diff from eager PyTorch is at most 1e-5 times max(1, its largest
|value|), attention weights' at most 1e-4.

A random-weight model at BERT-base's depth and width (12 layers, 768 wide, 12 heads, weights at a trained model's
spread) is exported and passes; the same graph with one thing wrong fails: two rows of its position table
swapped, one padding key let through the mask, one norm's weights off by 1%. The real all-mpnet-base-v2 (whose
attention maps differ by 2.3e-5 through onnxruntime) is exported by tests/export/test_real_mpnet.py.

Shape letters: B batch, T sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
import transformers
from onnx import numpy_helper

from export.graphs import export_graph
from export.parity import Batch, ParityError, check_graph, gate_failures, parity_batches, reference
from model.load import load_model
from tests.helpers import tokenizers

PROVIDERS = ["CPUExecutionProvider"]


def test_the_gate_scales_with_the_output() -> None:
    """2e-5 off a state of magnitude 40 is rounding; 2e-5 off values under 1 is not; weights get 1e-4."""
    assert not gate_failures("fp32", {"token_embeddings_max_abs_diff": 2e-5, "token_embeddings_max_abs": 40.0})
    assert gate_failures("fp32", {"token_embeddings_max_abs_diff": 2e-5, "token_embeddings_max_abs": 0.5}) == [
        "token_embeddings_max_abs_diff 2e-05 > 1e-05"]
    assert not gate_failures("fp32-opt", {"attentions_max_abs_diff": 2.3e-5, "attentions_max_abs": 1.0})
    assert gate_failures("fp32", {"attentions_max_abs_diff": 2e-4, "attentions_max_abs": 1.0}) == [
        "attentions_max_abs_diff 0.0002 > 0.0001"]


@pytest.fixture(scope="module")
def base_sized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Batch]]:
    """A BERT-base-shaped model's fast graph and its eager reference on the parity texts (two batches, padded)."""
    root = tmp_path_factory.mktemp("base-sized")
    tokenizer = tokenizers.wordpiece()
    config = transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=64,
                                     initializer_range=0.04)  # BERT-base's 12 x 768; a trained model's spread
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = transformers.BertModel(config)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "LayerNorm.weight" in name:
                    param.add_(torch.randn_like(param) * 0.3)  # trained norms are far from all-ones
    model.save_pretrained(root / "source")
    tokenizer.save(str(root / "source" / "tokenizer.json"))
    loaded = load_model(root / "source")
    export_graph(loaded.encoder, "fast", root / "fast.onnx")
    return root / "fast.onnx", reference(loaded, parity_batches()[1:3], 64, "fast")


def edited(path: Path, out: Path, name_part: str, change: Callable[[np.ndarray], np.ndarray]) -> Path:
    """A copy of the graph at `path` with the first initializer whose name holds `name_part` changed."""
    graph = onnx.load(str(path))
    tensor = next(t for t in graph.graph.initializer if name_part in t.name)
    tensor.CopyFrom(numpy_helper.from_array(change(numpy_helper.to_array(tensor).copy()), tensor.name))
    onnx.save(graph, str(out))
    return out


def swap_rows(table: np.ndarray) -> np.ndarray:
    table[[3, 4]] = table[[4, 3]]
    return table


def test_a_base_sized_model_passes(base_sized: tuple[Path, list[Batch]]) -> None:
    path, batches = base_sized
    figures = check_graph(path, "fp32", PROVIDERS, batches)
    assert figures["token_embeddings_max_abs_diff"] > 0 and figures["embeddings_max_abs_diff"] > 0, figures


@pytest.mark.parametrize("broken", ["position swapped", "norm off by 1%"])
def test_a_wrong_graph_fails(base_sized: tuple[Path, list[Batch]], tmp_path: Path, broken: str) -> None:
    path, batches = base_sized
    if broken == "position swapped":
        wrong = edited(path, tmp_path / "wrong.onnx", "position", swap_rows)
    else:
        wrong = edited(path, tmp_path / "wrong.onnx", "blocks.6.attn_norm.weight", lambda w: w * 1.01)
    with pytest.raises(ParityError, match="token_embeddings_max_abs_diff"):
        check_graph(wrong, "fp32", PROVIDERS, batches)


def test_a_mask_bit_flipped_fails(base_sized: tuple[Path, list[Batch]]) -> None:
    """The graph fed one padding key as real, against the reference of the true mask: what a graph that lost
    one mask bit computes."""
    path, batches = base_sized
    batch = next(b for b in batches if (b.inputs["attention_mask"] == 0).any())
    mask = batch.inputs["attention_mask"].copy()
    row, col = np.argwhere(mask == 0)[0]
    mask[row, col] = 1
    flipped = Batch({**batch.inputs, "attention_mask": mask}, batch.expected)
    with pytest.raises(ParityError, match="max_abs_diff"):
        check_graph(path, "fp32", PROVIDERS, [flipped])
