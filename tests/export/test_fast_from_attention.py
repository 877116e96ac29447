"""The bundle's fast graph is derived from its attention graph (export.graphs.fast_from_attention), not exported a
second time: derived, it has the ops (the exporter may order a constant elsewhere), inputs, outputs and weights of
the graph a fast export of the same model gives, and returns the same bits, for an encoder with token types (a BERT
cross-encoder) and a decoder with grouped key/value heads, sliding windows and local layers (Gemma3). A large
graph's derived copy reads its weights from the attention graph's data file, and runs as the attention graph does.

The Gemma3 row is in the heavy tier (make reliability; its two exports take about 25 s): in make test, every family's
derived fast graph is still checked against transformers by tests/export/test_families.py, EmbeddingGemma's and
Qwen3's sliding windows and grouped heads among them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from bundle.external_data import external_locations
from bundle.session import open_session
from export import onnxfiles
from export.graphs import export_graph, fast_from_attention
from model.load import load_model
from tests.helpers.decoders import save_decoder
from tests.helpers.families import RELEVANCE, save_hf

SOURCES: dict[str, Callable[[Path], object]] = {
    "bert-cross-encoder": lambda d: save_hf(d, "bert", "ForSequenceClassification", "small", names=RELEVANCE),
    "gemma3": lambda d: save_decoder(d, "gemma3", "Model", "small"),
}


def structure(path: Path) -> tuple[Counter[tuple[str, int, int]], list[str], list[str], list[np.ndarray]]:
    """(op type, input and output counts) of the nodes, the input and output names, and the weights (sorted by their
    bytes: the exporter names its constants differently in the two traces)."""
    graph = onnx.load(str(path)).graph
    nodes = Counter((node.op_type, len(node.input), len(node.output)) for node in graph.node)
    weights = sorted((numpy_helper.to_array(t) for t in graph.initializer), key=lambda a: (a.dtype.str, a.shape,
                                                                                          a.tobytes()))
    return nodes, [v.name for v in graph.input], [v.name for v in graph.output], weights


@pytest.mark.parametrize("source", [pytest.param(name, marks=[pytest.mark.heavy] if name == "gemma3" else [])
                                    for name in SOURCES])
def test_the_derived_fast_graph_is_the_exported_one(tmp_path: Path, cross_encoder_graphs: tuple[Path, Path, Path],
                                                    source: str) -> None:
    """The BERT's two graphs are the run's shared exports (tests/fixtures.py), the Gemma3's its own."""
    if source == "bert-cross-encoder":
        _, fast, attention = cross_encoder_graphs
    else:
        SOURCES[source](tmp_path / "source")
        encoder = load_model(tmp_path / "source").encoder
        fast, attention = tmp_path / "exported.onnx", tmp_path / "attention.onnx"
        export_graph(encoder, "fast", fast)
        export_graph(encoder, "attention", attention)
    fast_from_attention(attention, tmp_path / "derived.onnx")
    exported, derived = structure(fast), structure(tmp_path / "derived.onnx")
    assert derived[:3] == exported[:3]
    assert len(derived[3]) == len(exported[3])
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(derived[3], exported[3], strict=True))
    maps = structure(attention)
    assert maps[0].total() > derived[0].total() and "attentions" in maps[2]  # the maps' ops are gone
    feeds = batch(derived[1])
    ours = open_session(tmp_path / "derived.onnx").run(None, feeds)
    theirs = open_session(fast).run(None, feeds)
    assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))


def batch(names: list[str]) -> dict[str, np.ndarray]:
    """Two rows of ids, the second padded, by input name."""
    ids = np.array([[2, 7, 9, 11, 3, 5, 6], [2, 5, 3, 8, 0, 0, 0]], dtype=np.int64)
    values = {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64), "token_type_ids": np.zeros_like(ids)}
    return {name: values[name] for name in names}


def test_a_large_graphs_fast_copy_reads_the_attention_graphs_data(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnxfiles, "EXTERNAL_DATA_BYTES", 0)
    SOURCES["bert-cross-encoder"](tmp_path / "source")
    encoder = load_model(tmp_path / "source").encoder
    export_graph(encoder, "attention", tmp_path / "attention.onnx")
    fast_from_attention(tmp_path / "attention.onnx", tmp_path / "fast.onnx")
    assert external_locations(tmp_path / "fast.onnx") == {onnxfiles.data_name(tmp_path / "attention.onnx")}
    assert not (tmp_path / onnxfiles.data_name(tmp_path / "fast.onnx")).exists()  # no second copy of the weights
    feeds = batch(["input_ids", "attention_mask", "token_type_ids"])
    fast = open_session(tmp_path / "fast.onnx", "cpu", kind="fast").run(["logits"], feeds)[0]
    full = open_session(tmp_path / "attention.onnx", "cpu", kind="attention").run(["logits"], feeds)[0]
    assert np.array_equal(fast, full)
