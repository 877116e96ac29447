"""What `Graph.run` feeds a session for each kind of sequence (inference.runtime.graphs.TokenSequence): a pair's type
ids, zeros for a lone text's, none to a graph that takes none; attended flags over the attention mask's row; and
outputs over all of a sequence's tokens. A stand-in session records the feeds it was given.

Shape letters: B batch, T padded sequence, D hidden.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from inference.runtime.graphs import Graph, TokenSequence

D = 2


class Session:
    """An onnxruntime session's surface: its inputs, and a run that answers (B, T, D) token vectors of ones."""

    def __init__(self, inputs: list[str]) -> None:
        self.inputs = inputs
        self.fed: dict[str, np.ndarray] = {}

    def get_inputs(self) -> list[Any]:
        return [SimpleNamespace(name=name) for name in self.inputs]

    def get_overridable_initializers(self) -> list[Any]:
        return []

    def run(self, outputs: list[str], feeds: dict[str, np.ndarray], options: Any = None) -> list[np.ndarray]:
        self.fed = feeds
        return [np.ones((*feeds["input_ids"].shape, D))]  # (B, T, D)


def test_a_pair_gets_its_type_ids_a_lone_text_zeros_and_attended_flags_mask_its_row() -> None:
    session = Session(["input_ids", "attention_mask", "token_type_ids"])
    pair = TokenSequence(np.array([1, 2, 3, 4]), type_ids=np.array([0, 0, 1, 1]))
    text = TokenSequence(np.array([5, 6]))
    expanded = TokenSequence(np.array([7, 8, 9]), attended=np.array([1, 1, 0]))
    out = Graph(session, ["token_embeddings"], pad_id=0).run([pair, text, expanded])
    assert session.fed["input_ids"].tolist() == [[1, 2, 3, 4], [5, 6, 0, 0], [7, 8, 9, 0]]
    assert session.fed["token_type_ids"].tolist() == [[0, 0, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert session.fed["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]]
    assert [o["token_embeddings"].shape for o in out] == [(4, D), (2, D), (3, D)]  # every token, attended or not


def test_a_graph_without_token_type_ids_is_fed_none() -> None:
    session = Session(["input_ids", "attention_mask"])
    Graph(session, ["token_embeddings"], pad_id=0).run([TokenSequence(np.array([1, 2]), np.array([0, 1]))])
    assert sorted(session.fed) == ["attention_mask", "input_ids"]


def test_of_keeps_type_ids_only_when_any_is_set() -> None:
    ids = np.array([1, 2, 3])
    assert TokenSequence.of(ids, np.zeros(3, dtype=np.int64)).type_ids is None
    assert TokenSequence.of(ids, np.array([0, 1, 1])).type_ids.tolist() == [0, 1, 1]  # type: ignore[union-attr]
    assert len(TokenSequence.of(ids)) == 3
