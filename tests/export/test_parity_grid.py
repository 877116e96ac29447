"""onnxruntime equals eager PyTorch over a grid of batch sizes and lengths: the axes are dynamic. Each grid batch is
held to the exact gate (export/gates.py) against a float64 run of the same model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch

from bundle.feeds import input_names
from bundle.manifest import Manifest
from bundle.session import open_session
from export.gates import gate_failures
from export.graphs import GraphModule
from export.parity import figures
from export.references import Batch
from export.rounding import Rounding, eager_figures, float64_copy
from export.variants import optimize
from model.load import load_model

BATCHES = (1, 3, 8)
LENGTHS = (1, 7, "max")


def grid_batch(vocab: int, batch: int, length: int, seed: int) -> dict[str, np.ndarray]:
    """Random ids; rows after the first are padded to shorter lengths so padding is exercised."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, size=(batch, length)).astype(np.int64)  # (B, T)
    mask = np.ones_like(ids)
    for row in range(1, batch):
        mask[row, rng.integers(1, length + 1):] = 0
    types = (np.arange(length)[None, :] >= mask.sum(1, keepdims=True) // 2) * mask  # (B, T): a pair's segments
    return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": types.astype(np.int64)}


def eager(module: GraphModule, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with torch.no_grad():
        values = module(*(torch.from_numpy(inputs[name]) for name in module.input_names))
    return {n: v.numpy() for n, v in zip(module.names, values, strict=True)}


def exact(modules: tuple[GraphModule, GraphModule], inputs: dict[str, np.ndarray],
          got: dict[str, np.ndarray]) -> dict[str, float]:
    """The exact gate's figures of a graph's outputs `got` for `inputs`: (float32, float64) modules of one model."""
    single, double = modules
    batch = Batch(inputs, eager(double, inputs))
    rounding = Rounding([batch], eager_figures(batch, eager(single, inputs), single.names))
    return rounding.figures(figures([batch], [got], single.names))


def fed(session: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The feeds `session` takes (token_type_ids for a BERT-family graph)."""
    return {name: inputs[name] for name in input_names(session)}


@pytest.mark.parametrize("bundle_fixture", ["tiny_bundle", "tiny_hf_bundle"])
@pytest.mark.parametrize("kind", ["fast", "attention"])
def test_onnx_matches_eager_over_grid(bundle_fixture: str, kind: str, request: pytest.FixtureRequest) -> None:
    bundle: Path = request.getfixturevalue(bundle_fixture)
    manifest = Manifest.read(bundle)
    entry = manifest.graph(kind, "fp32")
    assert entry is not None
    encoder = load_model(Path(manifest.source.path)).encoder.eval()
    modules = GraphModule(encoder, kind), GraphModule(float64_copy(encoder), kind)
    sess = open_session(bundle / entry.file)
    names = [o.name for o in entry.outputs]
    for b in BATCHES:
        for length in (manifest.max_length if t == "max" else t for t in LENGTHS):
            inputs = grid_batch(manifest.model_config_["vocab_size"], b, int(length), seed=b * 1000 + int(length))
            got = dict(zip(names, sess.run(names, fed(sess, inputs)), strict=True))
            assert got["embeddings"].shape == (b, manifest.hidden_size)
            measured = exact(modules, inputs, got)
            assert not gate_failures("fp32", measured), (b, length, measured)


@pytest.mark.parametrize("bundle_fixture", ["tiny_bundle", "tiny_hf_bundle"])
def test_fused_graph_matches_eager_over_grid(
    bundle_fixture: str, request: pytest.FixtureRequest, tmp_path: Path,
) -> None:
    """fp32-opt fuses one Attention per block, keeps both axes dynamic, and reads the raw mask:
    left-padded rows (which a "count of real tokens" mask index would get wrong) match too."""
    bundle: Path = request.getfixturevalue(bundle_fixture)
    manifest = Manifest.read(bundle)
    encoder = load_model(Path(manifest.source.path)).encoder.eval()
    opt = tmp_path / "fast-fp32-opt.onnx"
    optimize(bundle / "fast-fp32.onnx", opt, encoder.config)
    ops = [n.op_type for n in onnx.load(str(opt)).graph.node]
    assert ops.count("Attention") == encoder.config.num_layers
    modules, sess = (GraphModule(encoder, "fast"), GraphModule(float64_copy(encoder), "fast")), open_session(opt)
    names = [o.name for o in sess.get_outputs()]
    for b in BATCHES:
        for length in (manifest.max_length if t == "max" else t for t in LENGTHS):
            right = grid_batch(manifest.model_config_["vocab_size"], b, int(length), seed=b * 1000 + int(length))
            left = {k: v[:, ::-1].copy() for k, v in right.items()}  # (B, T), padding first
            for inputs in (right, left):
                got = dict(zip(names, sess.run(names, fed(sess, inputs)), strict=True))
                measured = exact(modules, inputs, got)
                assert not gate_failures("fp32-opt", measured), (b, length, measured)


def test_hf_logits_match_transformers(tiny_hf_dir: Path, tiny_hf_bundle: Path) -> None:
    """Reference outside our code: the bundle's logits equal transformers' own BERT."""
    from transformers import BertForSequenceClassification

    reference = BertForSequenceClassification.from_pretrained(tiny_hf_dir).eval()
    inputs = grid_batch(reference.config.vocab_size, 3, 7, seed=3)
    with torch.no_grad():
        expected = reference(**{k: torch.from_numpy(v) for k, v in inputs.items()}).logits.numpy()
    sess = open_session(tiny_hf_bundle / "fast-fp32.onnx")
    (logits,) = sess.run(["logits"], fed(sess, inputs))
    np.testing.assert_allclose(logits, expected, atol=1e-4)


def test_embeddings_are_not_normalised(tiny_bundle: Path) -> None:
    """The service normalises; the graph hands out the raw pooled vector (mean of real tokens)."""
    sess = open_session(tiny_bundle / "fast-fp32.onnx")
    inputs = grid_batch(100, 3, 7, seed=5)
    pooled, tokens = sess.run(["embeddings", "token_embeddings"], fed(sess, inputs))
    mask = inputs["attention_mask"][..., None]  # (B, T, 1)
    np.testing.assert_allclose(pooled, (tokens * mask).sum(1) / mask.sum(1), atol=1e-5)


def test_attention_references_are_split_to_the_map_budget_and_compare_the_same(
    tiny_checkpoint: Path, tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """References runs an attention batch whose maps pass MAP_BATCH_BYTES as halves, down to single texts, in
    order (the fast graph's batches stay whole), and the attention graph's figures over them are those of the whole
    batches: the same texts, the same maps, less memory at once."""
    from export import parity, parity_texts, references
    from export.rounding import float64_references

    model = load_model(tiny_checkpoint)
    texts = parity_texts.parity_batches()
    whole = list(references.References(model, texts, 64, "attention"))
    rounding = float64_references({"": references.References(model, texts, 64, "attention")})[""]
    path = tiny_bundle / "attention-fp32.onnx"
    expected = parity.check_graph(path, "fp32", ["CPUExecutionProvider"], whole, rounding)
    monkeypatch.setattr(references, "MAP_BATCH_BYTES", 1)
    split = list(references.References(model, texts, 64, "attention"))
    assert [len(b.inputs["input_ids"]) for b in split] == [1] * sum(len(t) for t in texts)
    fast = references.References(model, texts, 64, "fast")
    assert [len(b.inputs["input_ids"]) for b in fast] == [len(t) for t in texts]
    rows = [row[row > 0].tolist() for b in whole for row in b.inputs["input_ids"] * b.inputs["attention_mask"]]
    assert [b.inputs["input_ids"][0].tolist() for b in split] == rows  # the same texts, in order, each unpadded
    assert parity.check_graph(path, "fp32", ["CPUExecutionProvider"], split, rounding) == pytest.approx(expected,
                                                                                                     abs=1e-6)
