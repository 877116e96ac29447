"""The parity check: onnxruntime against eager PyTorch on fixed texts, per graph variant; the gates each variant's
figures must meet are export.gates'. Every graph is measured against eager float32 on every parity text
({output}_max_abs_diff: reported, the gate of no exact variant); the exact variants (fp32, fp32-opt) are gated against
a float64 run of the same model on the float64 texts (export.rounding), allowed a multiple of eager float32's own
error there.

Shape letters: B batch, T sequence, D hidden, L layers, H heads.

Padding makes some outputs meaningless, so comparisons look at real tokens only: token_embeddings, token_logits and
the multi-vector outputs (multi_vectors, token_weights) at positions where attention_mask is 1, attentions where both
the query and the key are real tokens. embeddings (pooled over real tokens), logits and sparse (a max over real
tokens) are compared whole. Graphs are opened with the service's own session options (bundle.session), so the gate
checks what is served. The parity texts are export.parity_texts': fixed sentences of mixed lengths, cut into batches
of mixed sizes. The int8 variants are gated on two more sets, each on its own (export.calibration: 1,000 held-out
review snippets and 200 one- to three-word texts): check_sets. A model with LoRA adapters (model/lora.py) is gated on
sets of its own (adapter_sets): the parity texts with every row the base, then with every row one adapter (one set per
adapter), then with the rows cycling through the base and every adapter (mixed); each against eager PyTorch with the
same indices, each reported under its set's name.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort
import torch

from bundle.feeds import PIXEL_VALUES, pad
from bundle.session import ORT_PROVIDERS, open_session
from export.gates import EXACT_VARIANTS, gate_failures, merge_worst, reported
from export.graphs import GraphModule, output_shapes
from model.checkpoint import LoadedModel
from model.config import EncoderConfig
from model.tokenizer import pair_ids, token_ids

if TYPE_CHECKING:
    from export.rounding import Rounding

log = logging.getLogger(__name__)

# One parity input: a text, a text pair, or an image model's (C, H, W) pixel values
Parity = str | tuple[str, str] | np.ndarray
NOT_MEASURED = "not_measured_cuda_unavailable"  # 1.0 when no provider here could run the graph
CUDA_MEASURED = "cuda_measured"  # for graphs meant for CUDA: 1.0 measured on CUDA, 0.0 on CPU only
_SHORT_NAMES = {ort_name: short for short, ort_name in ORT_PROVIDERS.items()}


class ParityError(RuntimeError):
    """A graph missed its variant's gate; the message names the output and the figure."""


@dataclass
class Batch:
    inputs: dict[str, np.ndarray]  # the graph's inputs (input_ids, attention_mask, ...): (B, T) int64
    expected: dict[str, np.ndarray]  # eager outputs by graph output name


def reference(
    model: LoadedModel, texts: Sequence[Sequence[str | tuple[str, str]]], max_length: int, kind: str,
    token_types: bool = True,
) -> list[Batch]:
    """Eager outputs of the `kind` graph module for each batch of texts, or of text pairs (the pair template,
    with their token type ids), all held."""
    return list(References(model, texts, max_length, kind, token_types))


def adapter_sets(model: LoadedModel, texts: Sequence[Sequence[str | tuple[str, str]]], max_length: int,
                 kind: str) -> dict[str, References]:
    """The gate's sets for a model with adapters: "base", "adapter:{name}" for each, and "mixed" (row i of each
    batch gets index i mod (N + 1))."""
    names = model.encoder.config.adapters
    indices = {"base": 0, **{f"adapter:{name}": index for index, name in enumerate(names, start=1)}}
    sets = {label: References(model, texts, max_length, kind, adapters=[[index] * len(b) for b in texts])
            for label, index in indices.items()}
    mixed = [[row % (len(names) + 1) for row in range(len(b))] for b in texts]
    return {**sets, "mixed": References(model, texts, max_length, kind, adapters=mixed)}


# The attention maps of one parity batch, at most (a batch past it is halved, down to single texts).
MAP_BATCH_BYTES = 256 << 20
# The eager outputs of one set of texts held between the graphs checked on them, at most (References).
HELD_BYTES = 256 << 20
# What an export's peak resident memory is held to (docs/export.md, large models): this many times the model's fp32
# weights, plus this many bytes (the interpreter, torch, the exporter, onnxruntime). Measured, not enforced here:
# tests/export/test_export_memory.py exports a deep model under it.
MEMORY_BUDGET_WEIGHTS, MEMORY_BUDGET_BYTES = 4.0, 2 << 30


@dataclass
class References:
    """reference()'s batches. The attention graph's are computed one at a time each time they are iterated (an
    eager run per batch per graph checked), so that a deep model's maps of every batch are never held at once; a
    batch whose maps pass MAP_BATCH_BYTES is run as smaller batches, down to one text each, in order: a 0.6B
    decoder's maps of one 5 x 600-token parity batch are 3.2 GB, held by PyTorch, onnxruntime and the comparison at
    once (docs/export.md, large models). The other kinds' outputs (vectors, logits: 42 MB for that decoder's parity
    texts) are held after the first full pass, up to HELD_BYTES, so each graph checked after it (and the float64 pass
    before them all, export.rounding) costs no eager run of the model. adapters: each batch's rows' adapter indices
    (model/lora.py; None: every row the base)."""

    model: LoadedModel
    texts: Sequence[Sequence[Parity]]  # an image model's: (C, H, W) pixel values (export.parity_images)
    max_length: int
    kind: str
    token_types: bool = True
    adapters: Sequence[Sequence[int]] | None = None
    _held: list[Batch] | None = field(default=None, init=False, repr=False, compare=False)

    def __iter__(self) -> Iterator[Batch]:
        return self.admitted()

    def admitted(self, admit: Callable[[int], bool] | None = None,
                 left_out: list[References] | None = None) -> Iterator[Batch]:
        """The batches, in order; with `admit`, only those it admits, asked with the bytes of a batch's outputs
        (export.rounding's float64 texts). The attention kind, whose batches are never held, asks before each eager
        run, so a batch not admitted is never run; the others run (and hold) every batch and ask after. `left_out`:
        where the attention kind's batches not admitted are put, each as a fast-kind set of its texts."""
        if admit is not None and self.kind != "attention":
            yield from (b for b in self.admitted() if admit(_output_bytes(b.expected)))
            return
        if self._held is not None:
            yield from self._held
            return
        module = GraphModule(self.model.encoder.eval(), self.kind, self.token_types).eval()
        rows = self.adapters if self.adapters is not None else [[0] * len(batch) for batch in self.texts]
        held: list[Batch] | None = [] if self.kind != "attention" else None
        size = 0
        for batch, adapters in zip(self.texts, rows, strict=True):
            for computed in self._batches(module, batch, adapters, admit, left_out):  # admit: the attention kind's
                if held is not None:
                    held.append(computed)
                    size += _output_bytes(computed.expected)
                    held = held if size <= HELD_BYTES else None
                yield computed
        self._held = held

    def _batches(self, module: GraphModule, batch: Sequence[Parity], adapters: Sequence[int],
                 admit: Callable[[int], bool] | None = None,
                 left_out: list[References] | None = None) -> Iterator[Batch]:
        config = self.model.encoder.config
        feeds, rows, length, size = self._feeds(module, batch, adapters)
        maps = 4 * config.num_layers * config.num_heads * rows * length * length  # (B, L, H, T, T) float32
        if self.kind == "attention" and maps > MAP_BATCH_BYTES and len(batch) > 1:
            half = len(batch) // 2
            yield from self._batches(module, batch[:half], adapters[:half], admit, left_out)
            yield from self._batches(module, batch[half:], adapters[half:], admit, left_out)
            return
        if admit is not None and not admit(output_bytes(config, module.names, rows, length, size)):
            if left_out is not None:
                left_out.append(References(self.model, [batch], self.max_length, "fast", self.token_types,
                                           None if self.adapters is None else [adapters]))
            return
        with torch.no_grad():
            values = module(**{name: torch.from_numpy(feeds[name]) for name in module.input_names})
        yield Batch(feeds, {n: v.float().numpy() for n, v in zip(module.names, values, strict=True)})

    def _feeds(self, module: GraphModule, batch: Sequence[Parity],
               adapters: Sequence[int]) -> tuple[dict[str, np.ndarray], int, int, tuple[int, int] | None]:
        """The graph's inputs for one batch, its rows, their (padded) tokens and, for images, their size."""
        config = self.model.encoder.config
        if config.vision:  # (C, H, W) pixel values each, one size
            height, width = batch[0].shape[-2:]  # type: ignore[union-attr]
            feeds = {PIXEL_VALUES: np.stack(batch)}  # type: ignore[arg-type]  # (B, C, H, W)
            return feeds, len(batch), config.image_tokens(height, width), (height, width)
        tokenizer = self.model.tokenizer
        if isinstance(batch[0], tuple):
            ids, types = pair_ids(tokenizer, batch, self.max_length)  # type: ignore[arg-type]
        else:
            ids, types = token_ids(tokenizer, batch, self.max_length), None  # type: ignore[arg-type]
        feeds = pad(ids, config.pad_token_id, module.input_names, type_ids=types, adapters=adapters)
        return feeds, len(ids), max(len(row) for row in ids), None


def _output_bytes(expected: dict[str, np.ndarray]) -> int:
    return sum(v.nbytes for v in expected.values())


def output_bytes(config: EncoderConfig, names: Sequence[str], batch: int, length: int,
                 image_size: tuple[int, int] | None = None) -> int:
    """The float32 bytes of the outputs `names` of a (batch, length) run, or of `batch` images of `image_size`
    (export.graphs.output_shapes)."""
    sizes = {"batch": batch, "sequence": length, "layers": config.num_layers, "heads": config.num_heads}
    shapes = output_shapes(config, "attention" if "attentions" in names else "fast", image_size)
    return sum(4 * math.prod(sizes[d] if isinstance(d, str) else d for d in shapes[name]) for name in names)


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
    """(B, T) 1 where a token is real: the attention mask, or for an image every token (export.graphs)."""
    if "attention_mask" in batch.inputs:
        return batch.inputs["attention_mask"]
    return np.ones(batch.expected["token_embeddings"].shape[:2], dtype=np.int64)


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
