"""A bundle's graph in an onnxruntime session: pad a batch of token-id sequences, run, split the results.

Shape letters: B batch, T padded sequence, n real tokens of one input, D hidden, C labels,
L layers, H heads.

`Graph` objects are plain synchronous objects; the batcher calls them in its executor thread. A `Graph`
asks its session only for the outputs it serves: the fast graph's (B, T, D) `token_embeddings` are copied
out only by the `TOKENS` graph (/embed_all), which shares the fast graph's session. The session's inputs
are fed by name: `input_ids` and `attention_mask`, and `token_type_ids` (all 0) for a graph that takes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bundle.feeds import pad

Outputs = dict[str, np.ndarray]
TOKENS = "tokens"  # the graph kind for per-token vectors: the fast graph, token_embeddings only


def split(outputs: Outputs, lengths: Sequence[int]) -> list[Outputs]:
    """Per-input results over real tokens only (no padding)."""
    results = []
    for row, n in enumerate(lengths):
        one: Outputs = {}
        for name, value in outputs.items():
            if name == "attentions":
                one[name] = np.ascontiguousarray(value[row, :, :, :n, :n])  # (L, H, n, n)
            elif name == "token_embeddings":
                one[name] = np.ascontiguousarray(value[row, :n])  # (n, D)
            else:
                one[name] = value[row]  # (D,) or (C,)
        results.append(one)
    return results


class Graph:
    """One onnxruntime session and the outputs this caller fetches from it."""

    def __init__(self, session: Any, outputs: Sequence[str], pad_id: int) -> None:
        self.session, self.outputs, self.pad_id = session, list(outputs), pad_id
        self._types = "token_type_ids" in {i.name for i in session.get_inputs()}

    def run(self, sequences: Sequence[np.ndarray]) -> list[Outputs]:
        feeds = pad(sequences, self.pad_id)
        if self._types:
            feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])  # (B, T): one segment
        values = self.session.run(self.outputs, feeds)
        named = {name: np.asarray(value, dtype=np.float32) for name, value in zip(self.outputs, values, strict=True)}
        return split(named, [int(s.shape[0]) for s in sequences])

    def with_outputs(self, outputs: Sequence[str]) -> Graph:
        """The same session, fetching `outputs`."""
        return Graph(self.session, outputs, self.pad_id)

    @property
    def providers(self) -> list[str]:
        return list(self.session.get_providers())
