"""A bundle's graph in an onnxruntime session: pad a batch of token-id sequences, run, split the results.

Shape letters: B batch, T padded sequence, n real tokens of one input, D hidden, C labels,
L layers, H heads.

A graph kind names one of a loaded bundle's graphs (`LoadedBundle.graphs`): the manifest's "fast" and "attention",
and the views of the fast graph's session below. A batch kind (`BatchKind`) is what one batch runs: a graph kind,
and for an attention graph the maps it computes; only inputs of one batch kind share a batch.

`Graph` objects are plain synchronous objects; the batcher calls them in its executor thread. A `Graph`
asks its session only for the outputs it serves: the fast graph's (B, T, D) `token_embeddings` are copied
out only by the `TOKENS` graph (/embed_all), and each head's own output by its own kind (`VIEWS`): `PAIRS`
(a cross-encoder's logits of text pairs), `SPARSE` (SPLADE's (B, V) vectors), `TOKEN_LOGITS` ((B, T, C)
token labels), all sharing the fast graph's session; a multi-vector model's `MULTI` kind fetches its pooled
vector, (B, T, M) token vectors and (B, T) token weights (those it has) from one run of that session.
The session's inputs are fed by name: `input_ids` and `attention_mask`, `token_type_ids` for a graph that
takes them, and `adapter` (B,) for the graphs of a bundle with LoRA adapters: each row's adapter index (0 the
bare base, i + 1 the manifest's adapters[i]), so rows of different adapters share one batch.

An attention graph that takes the layers and heads to compute (bundle.feeds.selects: every bundle exported since
it could) computes only the maps asked for: the batch kind says which (`ATTENTION` every map,
`BatchKind("attention", (1, 3), (0,))` layers 1 and 3, head 0, named "attention:1,3:0"), so that runs of one choice
share a batch and the graph is fed it.

A sequence (`TokenSequence`) is one input's (n,) token ids, with its (n,) token type ids when it is a text pair
(its segments: `TokenSequence.of`): a graph that takes token_type_ids gets a pair's type ids and 0 for a lone
text, one that does not gets none. A sequence may also say which of its tokens are attended (its attention_mask
row; ColBERT's expansion tokens are fed and give vectors but are not attended): its outputs still cover all n
tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bundle.feeds import ADAPTER, PIXEL_VALUES, pad, selected, selects

Outputs = dict[str, np.ndarray]


@dataclass(frozen=True)
class BatchKind:
    """What one batch runs: the graph kind, and for an attention graph that selects, the layers and heads whose maps
    it computes, in order (none: every map). Its string is its name in the answer cache's keys: "fast",
    "attention:1,3:0"."""

    graph: str
    layers: tuple[int, ...] = ()
    heads: tuple[int, ...] = ()

    def __str__(self) -> str:
        if not (self.layers or self.heads):
            return self.graph
        return ":".join((self.graph, ",".join(map(str, self.layers)), ",".join(map(str, self.heads))))

    def feeds(self) -> dict[str, np.ndarray]:
        """The choice of maps it feeds its graph (bundle.feeds.selected; none: {})."""
        return selected(self.layers, self.heads) if self.layers or self.heads else {}


FAST, ATTENTION = BatchKind("fast"), BatchKind("attention")  # the manifest's graphs, whole
TOKENS = BatchKind("tokens")  # per-token vectors: the fast graph, token_embeddings only
PAIRS, SPARSE, TOKEN_LOGITS = BatchKind("pairs"), BatchKind("sparse"), BatchKind("token_logits")  # one head output
VIEWS = {TOKENS: "token_embeddings", PAIRS: "logits", SPARSE: "sparse", TOKEN_LOGITS: "token_logits"}
# A multi-vector model's one run: its pooled vector, token vectors and token weights together (those it has)
MULTI, MULTI_OUTPUTS = BatchKind("multi"), ("embeddings", "multi_vectors", "token_weights")
PER_TOKEN = ("token_embeddings", "token_logits", "multi_vectors", "token_weights")  # a row per token: (B, T, ...)


@dataclass(frozen=True, eq=False)
class TokenSequence:
    """What the batcher queues for one input: its (n,) token ids, a text pair's (n,) token type ids (None: a lone
    text's, all 0) and which of its tokens are attended (its (n,) attention_mask row; None: all of them)."""

    ids: np.ndarray
    type_ids: np.ndarray | None = None
    attended: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @classmethod
    def of(cls, ids: np.ndarray, type_ids: np.ndarray | None = None) -> TokenSequence:
        """One input's ids, with its type ids when any is set (all 0 is what a lone text is fed)."""
        return cls(ids) if type_ids is None or not type_ids.any() else cls(ids, type_ids)


@dataclass(frozen=True, eq=False)
class ImageSequence:
    """One image as the batcher queues it: its (C, H, W) float32 pixel values and the tokens it becomes."""

    pixels: np.ndarray
    tokens: int

    def __len__(self) -> int:
        return self.tokens


Input = TokenSequence | ImageSequence  # what one queued input is


def split(outputs: Outputs, lengths: Sequence[int]) -> list[Outputs]:
    """Per-input results over real tokens only (no padding)."""
    results = []
    for row, n in enumerate(lengths):
        one: Outputs = {}
        for name, value in outputs.items():
            if name == "attentions":
                one[name] = np.ascontiguousarray(value[row, :, :, :n, :n])  # (l, H|h, n, n)
            elif name in PER_TOKEN:
                one[name] = np.ascontiguousarray(value[row, :n])  # (n, D) or (n, C)
            else:
                one[name] = value[row]  # (D,) or (C,)
        results.append(one)
    return results


class Graph:
    """One onnxruntime session and the outputs this caller fetches from it."""

    def __init__(self, session: Any, outputs: Sequence[str], pad_id: int) -> None:
        self.session, self.outputs, self.pad_id = session, list(outputs), pad_id
        self._inputs = [i.name for i in session.get_inputs()]
        self._types = "token_type_ids" in self._inputs
        self.images = PIXEL_VALUES in self._inputs  # an image model's graph
        self.adapted = ADAPTER in self._inputs  # takes each row's adapter index
        self.selects = selects(session)  # an attention graph that takes the layers and heads to compute

    def run(self, sequences: Sequence[Input], adapters: Sequence[int] | None = None,
            chosen: dict[str, np.ndarray] | None = None, options: Any = None) -> list[Outputs]:
        """Outputs per sequence, over its real tokens; `adapters`: each sequence's adapter index (None: the bare base
        for all), fed to a graph that takes them; `chosen`: the layers and heads whose maps an attention graph that
        selects computes (`BatchKind.feeds`; None: all); `options`: onnxruntime's RunOptions for this run
        (bundle.session.shrinking_run). An image graph takes images (ImageSequence) only."""
        if chosen and not self.selects:
            raise ValueError("layers and heads chosen for a graph that computes every map")
        if self.images != all(isinstance(s, ImageSequence) for s in sequences):
            raise ValueError("an image graph runs images only, a text graph token sequences only")
        if self.images:
            pixels = np.stack([s.pixels for s in sequences if isinstance(s, ImageSequence)])  # (B, C, H, W)
            return self._run({PIXEL_VALUES: pixels}, sequences, chosen, options)
        return self._run_tokens(sequences, adapters, chosen, options)  # type: ignore[arg-type]

    def _run_tokens(self, sequences: Sequence[TokenSequence], adapters: Sequence[int] | None,
                    chosen: dict[str, np.ndarray] | None, options: Any) -> list[Outputs]:
        ids = [s.ids for s in sequences]
        types = [np.zeros_like(s.ids) if s.type_ids is None else s.type_ids for s in sequences] if self._types else None
        if not self.adapted and adapters is not None and any(adapters):
            raise ValueError("adapter indices given to a graph that takes no adapter input")
        feeds = pad(ids, self.pad_id, self._inputs, type_ids=types, adapters=adapters)  # (B, T) each; adapter (B,)
        for row, s in enumerate(sequences):
            if s.attended is not None:  # which of its tokens are attended (ColBERT's expansion: not all)
                feeds["attention_mask"][row, :len(s)] = s.attended
        return self._run(feeds, sequences, chosen, options)

    def _run(self, feeds: dict[str, np.ndarray], sequences: Sequence[Input],
             chosen: dict[str, np.ndarray] | None, options: Any) -> list[Outputs]:
        values = self.session.run(self.outputs, feeds | (chosen or {}), options)
        named = {name: np.asarray(value, dtype=np.float32) for name, value in zip(self.outputs, values, strict=True)}
        return split(named, [len(s) for s in sequences])

    def with_outputs(self, outputs: Sequence[str]) -> Graph:
        """The same session, fetching `outputs`."""
        return Graph(self.session, outputs, self.pad_id)

    @property
    def providers(self) -> list[str]:
        return list(self.session.get_providers())
