"""Same text, same vector: on every variant `variant=auto` may serve, a text's outputs alone equal its
outputs in any batch, whatever its partners and padding; dynamic int8 is the variant that fails this.

On graphs of the default model's shape (6 layers, width 384, 12 heads, feed-forward 1536, max length 256)
with seeded random weights and a small vocabulary: the property is about kernels and padding, not about
what the model says. Shape letters: B batch, T sequence, D hidden.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from bundle.feeds import KNOWN_INPUTS, input_names, pad
from bundle.invariance import batch_max_abs_diff, together
from bundle.manifest import BATCH_INVARIANCE_TOLERANCE, Measured
from bundle.session import open_session
from export.graphs import export_graph
from export.int8 import quantize
from export.smoothing import smooth
from export.variants import optimize
from export.variants import quantize as quantize_dynamic
from model.config import EncoderConfig
from model.encoder import Encoder

pytestmark = pytest.mark.slow
LENGTHS = (3, 9, 40, 131, 256)  # token counts, [CLS] and [SEP] included; 256 is the max length
OUTPUTS = ("embeddings", "token_embeddings", "logits")


def minilm_shaped() -> EncoderConfig:
    return EncoderConfig(
        vocab_size=1000, d_model=384, num_heads=12, num_layers=6, d_ff=1536, max_length=256,
        dropout=0.0, attention_dropout=0.0, head_dropout=0.0, head="linear", num_labels=2, label_names=("a", "b"),
    )


def sequences(lengths: tuple[int, ...], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.array([1, *rng.integers(5, 1000, n - 2), 2]) for n in lengths]


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """fp32, fp32-opt, int8 (static, calibrated on other random sequences) and int8-dynamic."""
    out = tmp_path_factory.mktemp("minilm-shaped")
    config = minilm_shaped()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        encoder = Encoder(config).eval()
    paths = {v: out / f"fast-{v}.onnx" for v in ("fp32", "fp32-opt", "int8", "int8-dynamic")}
    export_graph(encoder, "fast", paths["fp32"])
    optimize(paths["fp32"], paths["fp32-opt"], config)
    optimize(paths["fp32"], out / "unfused.onnx", config, fuse_attention=False)
    feeds = [pad([ids], 0, KNOWN_INPUTS) for ids in sequences((4, 12, 30, 64, 200), seed=1)]  # calibration
    groups = smooth(out / "unfused.onnx", out / "smoothed.onnx", feeds)
    everything = [n for g in groups for n in g]
    assert quantize(out / "smoothed.onnx", paths["int8"], everything, [], feeds, out / "calibration.json") == 6 * 6
    quantize_dynamic(paths["fp32"], paths["int8-dynamic"], config)
    return paths


def run(session: object, batch: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Per input, its outputs over its real tokens only."""
    feeds = pad(batch, 0, input_names(session))
    values = dict(zip(OUTPUTS, session.run(list(OUTPUTS), feeds), strict=True))  # type: ignore[attr-defined]
    return [{"embeddings": values["embeddings"][row], "logits": values["logits"][row],
             "token_embeddings": values["token_embeddings"][row, : len(ids)]} for row, ids in enumerate(batch)]


def alone_vs_batched(path: Path) -> float:
    """Largest |alone - in batch| over every text, output and batch: all five together; each text with one
    shorter and one longer partner of other content; each text first, last and between copies of others."""
    session = open_session(path, "cpu", intra_op_threads=2)
    texts = sequences(LENGTHS, seed=0)
    others = sequences(LENGTHS[::-1], seed=2)
    alone = [run(session, [ids])[0] for ids in texts]
    worst = 0.0
    for index, ids in enumerate(texts):
        for batch in ([*texts], [others[0], ids, others[-1]], [ids, *others], [*others, ids]):
            row = next(r for r, candidate in enumerate(batch) if candidate is ids)
            got = run(session, batch)[row]
            worst = max(worst, *(float(np.abs(got[name] - alone[index][name]).max()) for name in OUTPUTS))
    return worst


@pytest.mark.parametrize("variant", ["fp32", "fp32-opt", "int8"])
def test_served_variants_are_batch_invariant(graphs: dict[str, Path], variant: str) -> None:
    assert alone_vs_batched(graphs[variant]) <= BATCH_INVARIANCE_TOLERANCE


def test_dynamic_int8_is_not_batch_invariant(graphs: dict[str, Path]) -> None:
    """Per-batch activation scales: a text's vector moves with its partners, so auto never serves it."""
    assert alone_vs_batched(graphs["int8-dynamic"]) > 10 * BATCH_INVARIANCE_TOLERANCE


def test_export_measurement_tells_them_apart(graphs: dict[str, Path]) -> None:
    """export.measure's figure, which the manifest carries and auto trusts, agrees with the checks above."""
    batches = [sequences(LENGTHS[:2], seed=3), sequences(LENGTHS[2:], seed=4)]
    for variant, path in graphs.items():
        figure = batch_max_abs_diff(open_session(path, "cpu", intra_op_threads=2), batches)
        assert Measured(batch_max_abs_diff=figure).batch_invariant == (variant != "int8-dynamic"), (variant, figure)


def test_the_texts_run_together_are_the_shortest_that_fit_the_budget() -> None:
    texts = [[1] * n for n in (600, 3, 14, 1, 144, 14, 90)]
    assert together(texts, None) == list(range(7))  # no budget: all of them
    assert together(texts, 4096) == [1, 2, 3, 4, 5, 6]  # 6 x 144 fits; 7 x 600 does not
    assert together(texts, 500) == [1, 2, 3, 5, 6]  # 5 x 90 fits; 6 x 144 does not
    assert together(texts, 1) == [1, 3]  # two at least, the shortest
