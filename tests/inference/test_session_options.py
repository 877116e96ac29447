"""The sessions the service opens: onnxruntime's memory pattern off in each, its memory reuse off in the graphs that
answer states and on in the attention graph, whose (T, T) maps reuse each other's buffers (bundle/session.py says
what each costs at length), and its intra-op threads spinning within a run only; the warm-up gives back what its
runs grew the arenas and the heap to (inference.served)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inference.options import LoadOptions, ServingOptions
from inference.runtime import loading
from inference.runtime.loading import load_bundle
from tests.helpers.serving import core

SHRINK = "memory.enable_memory_arena_shrinkage"


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


async def test_the_warm_up_ends_with_each_arena_and_the_heap_given_back(tiny_bundle: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up's runs (8 x 128 tokens) grow each session's arena; then one short run of each session ends by
    shrinking it (bundle.session.shrinking_run), and the heap's free pages go back (loading.trim_heap)."""
    loaded = load_bundle(tiny_bundle, LoadOptions(provider="cpu", intra_op_threads=1))
    runs: list[tuple[int, Any, int]] = []  # (session, run options, tokens fed) of each run, in order
    sessions = {id(graph.session): graph.session for graph in loaded.graphs.values()}
    for session in sessions.values():
        def recording(outputs: Any, feeds: Any, options: Any = None, *, run: Any = session.run, key: int = id(session),
                      ) -> Any:
            runs.append((key, options, feeds["input_ids"].size))
            return run(outputs, feeds, options)
        monkeypatch.setattr(session, "run", recording)
    trims: list[None] = []
    monkeypatch.setattr(loading, "trim_heap", lambda: trims.append(None))
    async with core(loaded, ServingOptions(intra_op_threads=1)) as model:
        await model.warm_up()
    assert len(sessions) == 2 and {key for key, _, _ in runs} == set(sessions)  # fast (its views) and attention
    for key in sessions:
        mine = [(options, tokens) for k, options, tokens in runs if k == key]
        (last, short), warm = mine[-1], max(tokens for _, tokens in mine[:-1])
        assert all(options is None for options, _ in mine[:-1]) and warm > 10 * short, mine
        assert last is not None and last.get_run_config_entry(SHRINK) == "cpu:0"
    assert trims and model.warm
