"""Graph runners: pad a batch of token-id sequences, run one onnxruntime session, split the results.

Shape letters: B batch, T padded sequence, n real tokens of one input, D hidden, C labels,
L layers, H heads.

Runners are plain synchronous objects; the batcher calls them in its executor thread. `fault` is a
test hook: when set, it is called before every run and may raise to simulate a failing graph.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

Outputs = dict[str, np.ndarray]
ORT_PROVIDERS = {"cuda": "CUDAExecutionProvider", "cpu": "CPUExecutionProvider"}


class BatchRunner(Protocol):
    fault: Callable[[], None] | None

    def run(self, sequences: Sequence[np.ndarray]) -> list[Outputs]: ...


def pad(sequences: Sequence[np.ndarray], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad to the longest sequence: input_ids and attention_mask, both (B, T) int64."""
    longest = max(int(s.shape[0]) for s in sequences)
    input_ids = np.full((len(sequences), longest), pad_id, dtype=np.int64)  # (B, T)
    attention_mask = np.zeros((len(sequences), longest), dtype=np.int64)  # (B, T)
    for row, ids in enumerate(sequences):
        input_ids[row, : ids.shape[0]] = ids
        attention_mask[row, : ids.shape[0]] = 1
    return input_ids, attention_mask


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
        self.fault: Callable[[], None] | None = None

    def run(self, sequences: Sequence[np.ndarray]) -> list[Outputs]:
        if self.fault is not None:
            self.fault()
        input_ids, attention_mask = pad(sequences, self.pad_id)
        values = self.session.run(self.outputs, {"input_ids": input_ids, "attention_mask": attention_mask})
        named = {name: np.asarray(value, dtype=np.float32) for name, value in zip(self.outputs, values, strict=True)}
        return split(named, [int(s.shape[0]) for s in sequences])

    @property
    def providers(self) -> list[str]:
        return list(self.session.get_providers())


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def open_session(path: Path, provider: str, intra_op_threads: int, spinning: bool = False) -> Any:
    """An onnxruntime session tuned for serving: all graph optimisations, intra-op threads = cores, and
    (by default) no spinning, so an idle session's threads sleep rather than take CPU from the event loop
    or from the other session (graph runs never overlap: the batcher runs one at a time)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = intra_op_threads or cpu_cores()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    providers = [ORT_PROVIDERS["cuda"], ORT_PROVIDERS["cpu"]] if provider == "cuda" else [ORT_PROVIDERS["cpu"]]
    return ort.InferenceSession(str(path), sess_options=options, providers=providers)
