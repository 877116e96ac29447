"""Which attention run a request gets: a graph that takes the layers and heads (bundle.feeds.selects) is fed the
choice through its batch kind and computes only those maps; an older graph, which computes every map, is run as it
always was and the chosen maps are selected from its answer. A stand-in session records the feeds it was given.

Shape letters: B batch, T sequence, L layers, H heads, l and h the chosen ones.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from inference.limits import AttentionQuery
from inference.runtime.graphs import ATTENTION, BatchKind, Graph, TokenSequence
from inference.tasks.attention import attention_run

L, H = 4, 3


class Session:
    """An onnxruntime session's surface: its inputs, its overridable initializers (the choice, when `selects`), and a
    run that answers maps of the layers and heads fed (each map filled with 10 x layer + head)."""

    def __init__(self, selects: bool) -> None:
        self.selecting = selects
        self.fed: list[dict[str, np.ndarray]] = []

    def get_inputs(self) -> list[Any]:
        return [SimpleNamespace(name="input_ids"), SimpleNamespace(name="attention_mask")]

    def get_overridable_initializers(self) -> list[Any]:
        return [SimpleNamespace(name="layers"), SimpleNamespace(name="heads")] if self.selecting else []

    def run(self, outputs: list[str], feeds: dict[str, np.ndarray], options: Any = None) -> list[np.ndarray]:
        self.fed.append(feeds)
        layers, heads = feeds.get("layers", np.arange(L)), feeds.get("heads", np.arange(H))
        B, T = feeds["input_ids"].shape
        maps = (10 * layers[:, None] + heads[None, :]).astype(np.float32)  # (l, h)
        return [np.broadcast_to(maps[None, :, :, None, None], (B, len(layers), len(heads), T, T)).copy()]


def served(session: Session) -> Any:
    graph = Graph(session, ["attentions"], pad_id=0)
    return SimpleNamespace(bundle=SimpleNamespace(graphs={"attention": graph},
                                                  manifest=SimpleNamespace(num_layers=L, num_heads=H)))


def test_a_graph_that_selects_is_fed_the_choice_and_answers_only_those_maps() -> None:
    session = Session(selects=True)
    model = served(session)
    kind, left = attention_run(model, AttentionQuery(layers=[2, 0], heads=[1]))
    assert kind == BatchKind("attention", (2, 0), (1,)) and str(kind) == "attention:2,0:1"
    assert left.layers is None and left.heads is None  # nothing left to select from the answer
    (out,) = model.bundle.graphs[kind.graph].run([TokenSequence(np.array([5, 6, 7]))], None, kind.feeds())
    assert session.fed[0]["layers"].tolist() == [2, 0] and session.fed[0]["heads"].tolist() == [1]
    assert out["attentions"].shape == (2, 1, 3, 3)  # (l, h, n, n)
    assert out["attentions"][:, :, 0, 0].tolist() == [[21.0], [1.0]]


def test_a_graph_that_selects_asked_for_every_map_runs_as_it_always_did() -> None:
    kind, left = attention_run(served(Session(selects=True)), AttentionQuery())
    assert kind == ATTENTION and str(kind) == "attention" and kind.feeds() == {}
    assert left == AttentionQuery()


def test_an_older_graph_computes_every_map_and_the_service_selects_from_them() -> None:
    session = Session(selects=False)
    model = served(session)
    query = AttentionQuery(layers=[2, 0], heads=[1])
    kind, left = attention_run(model, query)
    assert kind == ATTENTION and left == query  # still to select, from every map
    (out,) = model.bundle.graphs["attention"].run([TokenSequence(np.array([5, 6]))])
    assert "layers" not in session.fed[0] and out["attentions"].shape == (L, H, 2, 2)
    with pytest.raises(ValueError, match="computes every map"):
        model.bundle.graphs["attention"].run([TokenSequence(np.array([5, 6]))], None,
                                              BatchKind("attention", (0,), (0,)).feeds())
