"""The parity check: onnxruntime against eager PyTorch on fixed texts, per graph variant; the gates each variant's
figures must meet are export.gates'. Every graph is measured against eager float32 on every parity text
({output}_max_abs_diff: reported, the gate of no exact variant); the exact variants (fp32, fp32-opt) are gated
against a float64 run of the same model on the float64 texts (export.rounding), allowed a multiple of eager float32's
own error there.

Shape letters: B batch, T sequence, D hidden, L layers, H heads.

Padding makes some outputs meaningless, so comparisons look at real tokens only: token_embeddings, token_logits and
the multi-vector outputs (multi_vectors, token_weights) at positions where attention_mask is 1, attentions where both
the query and the key are real tokens. embeddings (pooled over real tokens), logits and sparse (a max over real
tokens) are compared whole. Graphs are opened with the service's own session options (bundle.session), so the gate
checks what is served. The parity texts are export.parity_texts': fixed sentences of mixed lengths, cut into batches
of mixed sizes (an image model's: export.images' parity images, every token real); their eager outputs are
export.references'. The int8 variants are gated on two more sets, each on its own (export.calibration: 1,000 held-out
review snippets and 200 one- to three-word texts): check_sets. A model with LoRA adapters (model/lora.py) is gated on
sets of its own (export.references.adapter_sets): the parity texts with every row the base, then with every row one
adapter (one set per adapter), then with the rows cycling through the base and every adapter (mixed); each against
eager PyTorch with the same indices, each reported under its set's name.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort

from bundle.session import ORT_PROVIDERS, open_session
from export.gates import EXACT_VARIANTS, gate_failures, merge_worst, reported
from export.references import Batch, References

if TYPE_CHECKING:
    from export.rounding import Rounding

log = logging.getLogger(__name__)

NOT_MEASURED = "not_measured_cuda_unavailable"  # 1.0 when no provider here could run the graph
CUDA_MEASURED = "cuda_measured"  # for graphs meant for CUDA: 1.0 measured on CUDA, 0.0 on CPU only
_SHORT_NAMES = {ort_name: short for short, ort_name in ORT_PROVIDERS.items()}


class ParityError(RuntimeError):
    """A graph missed its variant's gate; the message names the output and the figure."""


# What an export's peak resident memory is held to (docs/export.md, large models): this many times the model's fp32
# weights, plus this many bytes (the interpreter, torch, the exporter, onnxruntime). Measured, not enforced here:
# tests/export/test_export_memory.py exports a deep model under it.
MEMORY_BUDGET_WEIGHTS, MEMORY_BUDGET_BYTES = 4.0, 2 << 30


def available_providers(wanted: Sequence[str]) -> list[str]:
    have = set(ort.get_available_providers())
    return [p for p in wanted if p in have]


def run(sess: ort.InferenceSession, batches: Iterable[Batch]) -> Iterator[tuple[Batch, dict[str, np.ndarray]]]:
    """Each batch with the session's outputs for it, in turn (one batch's outputs alive at a time)."""
    names = [o.name for o in sess.get_outputs()]
    for b in batches:
        yield b, dict(zip(names, sess.run(names, b.inputs), strict=True))


TOKEN_OUTPUTS = ("token_embeddings", "token_logits", "multi_vectors", "token_weights")  # a value per token


def real_tokens(batch: Batch) -> np.ndarray:
    """(B, T) 1 where a token is real: the attention mask, or every token for an image and for a text tower read at
    its fixed length (SigLIP's: its outputs are longer than its inputs, every position read; export.graphs)."""
    shape = batch.expected["token_embeddings"].shape[:2]  # (B, T)
    mask = batch.inputs.get("attention_mask")
    return mask if mask is not None and mask.shape == shape else np.ones(shape, dtype=np.int64)


def real_positions(name: str, value: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The entries of an output that real tokens determine, flattened to (N, last axis)."""
    real = mask.astype(bool)  # (B, T)
    if name in TOKEN_OUTPUTS:
        return value[real].reshape(int(real.sum()), -1)  # (N, D), (N, C), (N, M) or (N, 1)
    if name == "attentions":
        pairs = real[:, None, None, :, None] & real[:, None, None, None, :]  # (B, 1, 1, T, T)
        return value[np.broadcast_to(pairs, value.shape)][:, None]  # (N, 1)
    return value.reshape(len(value), -1)


def _min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    num = (a * b).sum(-1)
    den = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    return float((num / np.maximum(den, 1e-12)).min())


def figures(batches: Iterable[Batch], got: Iterable[dict[str, np.ndarray]], names: Sequence[str]) -> dict[str, float]:
    """max_abs_diff and min_cosine per output over real positions; label_agreement with logits."""
    return tally(zip(batches, got, strict=True), names)


def tally(compared: Iterable[tuple[Batch, dict[str, np.ndarray]]], names: Sequence[str]) -> dict[str, float]:
    """figures() over (batch, graph outputs) pairs, taken one at a time, and attention maps a layer at a time, so no
    copy of all the outputs is ever made."""
    out: dict[str, float] = {}
    agree = rows = 0
    for batch, outputs in compared:
        mask = real_tokens(batch)
        for name in names:
            out = merge_worst(out, _output_figures(name, batch.expected[name], outputs[name], mask))
        if "logits" in names:
            same = batch.expected["logits"].argmax(-1) == outputs["logits"].argmax(-1)
            agree, rows = agree + int(same.sum()), rows + same.size
    if rows:
        out["label_agreement"] = agree / rows
    return out


def _output_figures(name: str, expected: np.ndarray, got: np.ndarray, mask: np.ndarray) -> dict[str, float]:
    """One batch's figures for output `name`: {name}_max_abs_diff, {name}_max_abs (the scale a "scaled" gate holds
    the diff to) and, for vectors, {name}_min_cosine (cosine of 2-class logits means little)."""
    if name == "attentions":  # (B, L, H, T, T)
        real = mask.astype(bool)
        pairs = real[:, None, :, None] & real[:, None, None, :]  # (B, 1, T, T)
        diff = scale = 0.0
        for layer in range(expected.shape[1]):
            chosen = np.broadcast_to(pairs, expected[:, layer].shape)
            ref, new = expected[:, layer][chosen], got[:, layer][chosen].astype(np.float32)
            diff, scale = max(diff, float(np.abs(ref - new).max())), max(scale, float(np.abs(ref).max()))
        return {f"{name}_max_abs_diff": diff, f"{name}_max_abs": scale}
    ref = real_positions(name, expected, mask)
    new = real_positions(name, got, mask).astype(np.float32)
    out = {f"{name}_max_abs_diff": float(np.abs(ref - new).max()), f"{name}_max_abs": float(np.abs(ref).max())}
    if name in ("embeddings", "token_embeddings", "multi_vectors"):
        out[f"{name}_min_cosine"] = _min_cosine(ref, new)
    return out


def check_graph(path: Path, variant: str, providers: Sequence[str], batches: Iterable[Batch],
                rounding: Rounding | None = None) -> dict[str, float]:
    """Measure `path` on every provider here that it is meant for; raise ParityError on a miss. An exact variant is
    gated on `rounding` (export.rounding: the float64 texts; without it, it misses); `batches` give every variant its
    figures against eager float32 ({output}_max_abs_diff), the gate of the others."""
    names = [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]
    runnable = available_providers(providers) or _cpu_fallback(path)
    if not runnable:
        return {NOT_MEASURED: 1.0}
    worst: dict[str, float] = {}
    exact = rounding if variant in EXACT_VARIANTS else None
    for provider in runnable:
        session = open_session(path, _SHORT_NAMES[provider], kind="attention" if "attentions" in names else "fast")
        measured, against64 = _tally_both(session, batches, names, exact)
        if exact is not None:
            measured |= exact.figures(against64)
        worst = merge_worst(worst, measured)
    misses = gate_failures(variant, worst)
    if misses:
        raise ParityError(f"{path.name} ({variant}) missed its parity gate: {'; '.join(misses)}")
    figures = {k: v for k, v in worst.items() if reported(variant, k)}
    if "CUDAExecutionProvider" in providers:
        figures[CUDA_MEASURED] = float("CUDAExecutionProvider" in runnable)
    return figures


def _tally_both(session: ort.InferenceSession, batches: Iterable[Batch], names: Sequence[str],
                rounding: Rounding | None) -> tuple[dict[str, float], dict[str, float]]:
    """The session's figures against eager float32 on `batches`, and against float64 on `rounding`'s batches: one
    onnxruntime run per batch, its outputs compared with both where the batch is one of the float64 texts (they are
    the same inputs, met in the same order: export.rounding); a float64 batch not met is run on its own."""
    pending = iter(rounding.batches if rounding is not None else ())
    waiting = next(pending, None)
    exact: dict[str, float] = {}

    def runs() -> Iterator[tuple[Batch, dict[str, np.ndarray]]]:
        nonlocal waiting, exact
        for batch, outputs in run(session, batches):
            if waiting is not None and _same_inputs(batch, waiting):
                exact = merge_worst(exact, tally([(waiting, outputs)], names))
                waiting = next(pending, None)
            yield batch, outputs

    measured = tally(runs(), names)
    if waiting is not None:
        exact = merge_worst(exact, tally(run(session, [waiting, *pending]), names))
    return measured, exact


def _same_inputs(a: Batch, b: Batch) -> bool:
    return a.inputs.keys() == b.inputs.keys() and all(np.array_equal(a.inputs[k], b.inputs[k]) for k in a.inputs)


def check_sets(path: Path, variant: str, providers: Sequence[str],
               sets: dict[str, list[Batch]] | dict[str, References],
               roundings: dict[str, Rounding] | None = None) -> dict[str, float]:
    """check_graph on each named set in turn (with its Rounding, by the same name); the first miss raises ParityError,
    naming the set. Figures are reported per set ("held_out_label_agreement") and as the worst over all sets (plain
    names)."""
    figures: dict[str, float] = {}
    worst: dict[str, float] = {}
    for name, batches in sets.items():
        try:
            measured = check_graph(path, variant, providers, batches, (roundings or {}).get(name))
        except ParityError as err:
            raise ParityError(f"{err} (on the {name} texts)") from None
        figures |= {f"{name}_{key}": value for key, value in measured.items()}
        worst = merge_worst(worst, measured)
    return {**worst, **figures}


def _cpu_fallback(path: Path) -> list[str]:
    """A CUDA-only graph (fp16) is still measured on CPU when onnxruntime's CPU provider runs it."""
    try:
        open_session(path, "cpu")
    except Exception:  # noqa: BLE001 - any load failure means "cannot measure here"
        return []
    return ["CPUExecutionProvider"]
