"""The sessions the service opens: onnxruntime's memory pattern off in each, its memory reuse off in the graphs that
answer states and on in the attention graph, whose (T, T) maps reuse each other's buffers (bundle/session.py says
what each costs at length)."""

from __future__ import annotations

from pathlib import Path

from inference.options import LoadOptions
from inference.runtime.loading import load_bundle


def test_only_the_attention_graph_keeps_the_memory_reuse(tiny_bundle: Path) -> None:
    loaded = load_bundle(tiny_bundle, LoadOptions(provider="cpu"))
    assert {"fast", "attention"} <= set(loaded.graphs)
    for kind, graph in loaded.graphs.items():
        options = graph.session.get_session_options()
        assert not options.enable_mem_pattern, kind
        assert options.enable_mem_reuse == (kind == "attention"), kind
