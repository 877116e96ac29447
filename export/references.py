"""The parity checks' inputs and eager outputs (export.parity): `References`, the batches of fixed texts (or an image
model's images) with the eager PyTorch outputs of one graph kind, computed as they are iterated and held where small
enough; `adapter_sets`, a model with LoRA adapters' sets of them.

Shape letters: B batch, T sequence, L layers, H heads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from bundle.feeds import PIXEL_VALUES, pad
from export.graphs import GraphModule, output_shapes
from model.checkpoint import LoadedModel
from model.config import EncoderConfig
from model.tokenizer import pair_ids, token_ids

# One parity input: a text, a text pair, or an image model's (C, H, W) pixel values
Parity = str | tuple[str, str] | np.ndarray


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
