"""Graph runners: pad a batch of token-id sequences, run one onnxruntime session, split the results.

Shape letters: B batch, T padded sequence, n real tokens of one input, D hidden, C labels,
L layers, H heads.

Runners are plain synchronous objects; the batcher calls them in its executor thread. A runner asks
its session only for the outputs it serves: the fast graph's (B, T, D) `token_embeddings` are copied
out only by the `TOKENS` runner (/embed_all), which shares the fast graph's session.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from bundle.feeds import pad

Outputs = dict[str, np.ndarray]
TOKENS = "tokens"  # the runner kind for per-token vectors: the fast graph, token_embeddings only


class BatchRunner(Protocol):
    def run(self, sequences: Sequence[np.ndarray]) -> list[Outputs]: ...


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


class OrtRunner:
    """One onnxruntime session and the outputs this service needs from it."""

    def __init__(self, session: Any, outputs: Sequence[str], pad_id: int) -> None:
        self.session, self.outputs, self.pad_id = session, list(outputs), pad_id

    def run(self, sequences: Sequence[np.ndarray]) -> list[Outputs]:
        values = self.session.run(self.outputs, pad(sequences, self.pad_id))
        named = {name: np.asarray(value, dtype=np.float32) for name, value in zip(self.outputs, values, strict=True)}
        return split(named, [int(s.shape[0]) for s in sequences])

    def with_outputs(self, outputs: Sequence[str]) -> OrtRunner:
        """Another runner on the same session that fetches `outputs`."""
        return OrtRunner(self.session, outputs, self.pad_id)

    @property
    def providers(self) -> list[str]:
        return list(self.session.get_providers())
