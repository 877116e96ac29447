"""Static int8's pieces: SmoothQuant is an identity in fp32, and the fewest sensitive groups stay fp32 (the
texts it calibrates and is gated on: test_calibration.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from bundle.session import open_session
from export import int8 as int8_mod
from export.parity import ParityError
from export.parity_texts import PARITY_TEXTS
from export.smoothing import smooth, smoothing_scales
from export.variants import optimize
from model.load import load_model
from model.tokenizer import encode


@pytest.fixture(scope="module")
def unfused(tiny_checkpoint: Path, tiny_bundle: Path,
            tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, np.ndarray]]]:
    """The tiny model's graph as int8 starts from it, and one batch-1 feed per parity text."""
    model = load_model(tiny_checkpoint)
    out = tmp_path_factory.mktemp("int8") / "unfused.onnx"
    optimize(tiny_bundle / "fast-fp32.onnx", out, model.encoder.config, fuse_attention=False)
    feeds = []
    for text in PARITY_TEXTS:
        ids, mask = encode(model.tokenizer, [text], 64)  # (1, T) each
        feeds.append({"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": 0 * ids.numpy()})
    return out, feeds


def int8_matmuls(graph: Path) -> int:
    """MatMuls whose weight comes out of a DequantizeLinear (the QDQ form quantize_static writes)."""
    nodes = onnx.load(str(graph)).graph.node
    dequantized = {n.output[0] for n in nodes if n.op_type == "DequantizeLinear"}
    return sum(n.op_type == "MatMul" and n.input[1] in dequantized for n in nodes)


def test_smoothing_scales_follow_the_smoothquant_formula() -> None:
    x_max = np.array([8.0, 1.0, 0.5])
    weights = [np.array([[0.5, -2.0], [1.0, 0.1], [0.2, 0.2]]), np.array([[1.0], [4.0], [0.1]])]
    expected = np.array([8.0 ** 0.5 / 2.0 ** 0.5, 1.0 / 4.0 ** 0.5, 0.5 ** 0.5 / 0.2 ** 0.5])
    np.testing.assert_allclose(smoothing_scales(x_max, weights, alpha=0.5), expected, rtol=1e-6)


def test_smoothing_is_an_identity_in_fp32(unfused: tuple[Path, list[dict[str, np.ndarray]]], tmp_path: Path) -> None:
    source, feeds = unfused
    groups = smooth(source, tmp_path / "smoothed.onnx", feeds, alpha=0.65)
    smoothed = onnx.load(str(tmp_path / "smoothed.onnx"))
    assert len(groups) == 4 * 2 and [len(g) for g in groups[:4]] == [3, 1, 1, 1]  # q/k/v share an input
    assert sum(n.op_type == "Mul" and n.name.endswith("_smoothed_mul") for n in smoothed.graph.node) == len(groups)
    inverse = [i for i in smoothed.graph.initializer if i.name.endswith("_smoothed_inverse")]
    assert all(not np.allclose(onnx.numpy_helper.to_array(i), 1.0) for i in inverse)  # a real rescaling
    before, after = open_session(source), open_session(tmp_path / "smoothed.onnx")
    for feed in feeds:
        for want, got in zip(before.run(None, feed), after.run(None, feed), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_fewest_fp32_groups_that_pass(unfused: tuple[Path, list[dict[str, np.ndarray]]], tmp_path: Path) -> None:
    """The gate decides; the loop stops at the first step of KEEP_FP32_STEPS that passes."""
    source, feeds = unfused
    groups = smooth(source, tmp_path / "smoothed.onnx", feeds)
    order = list(range(len(groups)))[::-1]
    tried: list[int] = []

    def passes(graph: Path) -> dict[str, float]:
        tried.append(int8_matmuls(graph))
        if tried[-1] > 8:
            raise ParityError("too many int8 MatMuls")
        return {"embeddings_min_cosine": 1.0}

    def never(graph: Path) -> dict[str, float]:
        raise ParityError("never")

    args = (tmp_path / "smoothed.onnx", tmp_path / "int8.onnx", groups, order, feeds, tmp_path / "calibration.json")
    figures = int8_mod._fewest_fp32(*args, passes)
    # last groups first: down, up, out (one MatMul each), then q/k/v (three) of block 1 kept fp32
    assert tried == [12, 11, 10, 9, 6]
    assert figures == {"embeddings_min_cosine": 1.0, "quantized_matmuls": 6.0, "fp32_matmul_groups": 4.0}
    with pytest.raises(ParityError, match="never"):
        int8_mod._fewest_fp32(*args, never)
