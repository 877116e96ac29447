"""The sessions the service opens: onnxruntime's memory pattern off in each, its memory reuse off in the graphs that
answer states and on in the attention graph, whose (T, T) maps reuse each other's buffers (bundle/session.py says
what each costs at length), and its intra-op threads spinning within a run only."""

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


def test_intra_op_threads_spin_within_a_run_and_stop_when_it_ends(tiny_bundle: Path) -> None:
    """bundle/session.py: spinning between a run's operators, stopped at its end unless the operator keeps it on."""
    for spinning, stop in ((False, "1"), (True, "0")):
        loaded = load_bundle(tiny_bundle, LoadOptions(provider="cpu", intra_op_spinning=spinning))
        for kind, graph in loaded.graphs.items():
            options = graph.session.get_session_options()
            assert options.get_session_config_entry("session.intra_op.allow_spinning") == "1", kind
            assert options.get_session_config_entry("session.force_spinning_stop") == stop, (kind, spinning)
