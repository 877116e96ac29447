"""The operations the routes expose: embed, classify, similarity, per-token embeddings, attention,
tokenize, decode. Plain asyncio + numpy.

Each request is checked (`service.limits`: counts, characters, answer sizes), admitted to the batcher as
one permit per input (or refused at once), tokenised in one batch (on the event loop when small: a
hand-off to the executor costs more than encoding a few short texts; off the loop otherwise), queued,
and post-processed.
A chunked request (`overlap` given) is tokenised first, since its windows are only known then; each
window then takes one permit and runs as its own item (`service.chunking`).
Errors are domain errors from `service.errors`; nothing here knows about HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any, TypeVar

import numpy as np

from service import chunking, postprocess, timing
from service.batcher import Batcher, BatchObserver, Ticket
from service.errors import ServiceError, Unsupported
from service.limits import (
    AttentionQuery,
    EngineLimits,
    Inputs,
    check_attention_size,
    check_dimensions,
    check_embed_all_size,
    check_finite,
    check_indices,
    check_inputs,
)
from service.runner import TOKENS
from service.runtime import Runtime
from service.tokenize import Direction, Encoded

T = TypeVar("T")
Scores = postprocess.ScoreFunction
WARM_UP_BATCH, WARM_UP_TOKENS = 8, 128  # the shape warm-up runs the fast graph at (attention: 1 x 128)
INLINE_TOKENIZE_CHARS = 2_000  # requests with fewer characters in all are tokenised on the event loop (~tens of us)


class Engine:
    def __init__(
        self, runtime: Runtime, batcher: Batcher, limits: EngineLimits, executor: Executor,
        observer: BatchObserver | None = None, name: str | None = None,
    ) -> None:
        self.name = name or runtime.manifest.name  # the served name: requests route by it
        self.runtime, self.batcher, self.limits = runtime, batcher, limits
        self._executor, self._observer = executor, observer or BatchObserver()
        self.warm = False
        self._probe = asyncio.Lock()

    @property
    def ready(self) -> bool:
        return self.warm and self.batcher.last_ok

    async def check_ready(self) -> bool:
        """`ready`, but after a failed inference one small probe run (one at a time) checks whether the
        graph works again, so readiness recovers by itself once a fault clears, traffic or not."""
        if self.warm and not self.batcher.last_ok and not self._probe.locked():
            async with self._probe:
                with contextlib.suppress(ServiceError):  # still failing (or busy): stay not ready
                    await self._run("fast", ["ready probe"], truncate=True, direction="right")
        return self.ready

    async def warm_up(self) -> None:
        """Runs of each graph at a realistic shape before /ready turns 200 (arena allocations, kernel choice,
        caches): the fast graph at batch 8 x 128 tokens, the attention graph at 1 x 128, so the first real
        requests do not pay for them."""
        text = " ".join(["warm up"] * (WARM_UP_TOKENS // 2 - 1))  # 126 word pieces + [CLS] and [SEP]
        for kind in self.runtime.runners:  # not a request: the request limits (inputs, characters) do not apply
            if kind == TOKENS:
                continue  # the fast graph's session: warmed as "fast"
            batch = 1 if kind == "attention" else min(WARM_UP_BATCH, self.batcher.limits.max_queue)
            encoded = self.runtime.tokenizer.encode([text] * batch, truncate=True)
            with self.batcher.admit(batch) as ticket:
                await self._submit(ticket, kind, [e.ids for e in encoded])
        self.warm = True

    async def embed(
        self, inputs: Inputs, *, truncate: bool | None, direction: Direction, normalize: bool, dimensions: int | None,
        overlap: int | None = None,
    ) -> tuple[np.ndarray, int]:
        """(N, D') embeddings and the number of tokens run. With `overlap`, each input is chunked and its
        vector is the token-weighted mean of its windows' pooled vectors, before normalisation."""
        check_dimensions(dimensions, self.runtime.manifest.hidden_size)
        if overlap is not None:
            windows, values = await self._run_windows(inputs, overlap, "embeddings")
            vectors = np.stack([chunking.pool(v, ws) for v, ws in zip(values, windows, strict=True)])  # (N, D)
            return postprocess.embeddings(vectors, normalize, dimensions), _tokens_run(windows)
        encoded, flat = await self._run("fast", inputs, truncate, direction)
        vectors = np.stack([o["embeddings"] for o in flat])  # (N, D)
        return postprocess.embeddings(vectors, normalize, dimensions), sum(e.length for e in encoded)

    async def embed_windows(
        self, inputs: Inputs, *, overlap: int, normalize: bool, dimensions: int | None,
    ) -> tuple[list[list[dict[str, Any]]], int]:
        """Per input, each window's span and embedding; and the number of tokens run."""
        check_dimensions(dimensions, self.runtime.manifest.hidden_size)
        windows, values = await self._run_windows(inputs, overlap, "embeddings")
        return [
            chunking.answers(ws, postprocess.embeddings(v, normalize, dimensions), "embedding")  # (K, D')
            for v, ws in zip(values, windows, strict=True)
        ], _tokens_run(windows)

    async def classify(
        self, inputs: Sequence[str], *, truncate: bool | None, direction: Direction,
        top_k: int | None, scores: Scores, overlap: int | None = None,
    ) -> list[list[dict[str, object]]]:
        """Per input, labels and scores best first. With `overlap`, each input is chunked and its logits are
        the token-weighted mean of its windows' logits, before `scores` is applied."""
        labels = self._labels()
        if overlap is not None:
            windows, values = await self._run_windows(inputs, overlap, "logits")
            logits = np.stack([chunking.pool(v, ws) for v, ws in zip(values, windows, strict=True)])  # (N, C)
        else:
            _, flat = await self._run("fast", inputs, truncate, direction)
            logits = np.stack([o["logits"] for o in flat])  # (N, C)
        return postprocess.top_labels(postprocess.scores(logits, scores), labels, top_k)

    async def classify_windows(
        self, inputs: Sequence[str], *, overlap: int, top_k: int | None, scores: Scores,
    ) -> list[list[dict[str, Any]]]:
        """Per input, each window's span and its labels and scores, best first."""
        labels = self._labels()
        windows, values = await self._run_windows(inputs, overlap, "logits")
        return [
            chunking.answers(ws, postprocess.top_labels(postprocess.scores(v, scores), labels, top_k), "scores")
            for v, ws in zip(values, windows, strict=True)
        ]

    async def similarity(
        self, source: str, sentences: Sequence[str], *, truncate: bool | None, direction: Direction,
    ) -> np.ndarray:
        """(N,) cosine similarity of each sentence's embedding with the source sentence's."""
        vectors, _ = await self.embed(
            [source, *sentences], truncate=truncate, direction=direction, normalize=True, dimensions=None,
        )
        return vectors[1:] @ vectors[0]  # (N,) unit vectors: dot product = cosine

    async def embed_all(
        self, inputs: Sequence[str], *, truncate: bool | None, direction: Direction,
    ) -> list[np.ndarray]:
        """Per input, (n, D) token vectors (the encoder's last hidden states, special tokens included)."""
        if TOKENS not in self.runtime.runners:
            raise Unsupported("this bundle's fast graph has no token_embeddings output")
        check_inputs(self.limits, inputs)
        with self.batcher.admit(len(inputs)) as ticket:
            encoded = await self._encode(inputs, truncate, direction)
            check_embed_all_size(self.limits, encoded, self.runtime.manifest.hidden_size)
            outputs = await self._submit(ticket, TOKENS, [e.ids for e in encoded])
        return [o["token_embeddings"] for o in outputs]

    async def outputs(
        self, inputs: Inputs, *, truncate: bool | None, direction: Direction,
    ) -> tuple[dict[str, np.ndarray], list[int]]:
        """The fast graph's outputs, stacked and not post-processed: embeddings (N, D) pooled but not
        normalised, logits (N, C) when the bundle has labels; and each input's token count."""
        encoded, outputs = await self._run("fast", inputs, truncate, direction)
        stacked = {name: np.stack([o[name] for o in outputs]) for name in outputs[0]}  # (N, D), (N, C)
        return stacked, [e.length for e in encoded]

    async def attention(
        self, inputs: Inputs, query: AttentionQuery, *, truncate: bool | None, direction: Direction,
    ) -> list[dict[str, Any]]:
        if "attention" not in self.runtime.runners:
            raise Unsupported("this bundle has no attention graph (manifest.json graphs has no kind 'attention')")
        check_indices(query, self.runtime.manifest.num_layers, self.runtime.manifest.num_heads)
        check_inputs(self.limits, inputs)
        with self.batcher.admit(len(inputs)) as ticket:
            encoded = await self._encode(inputs, truncate, direction)
            check_attention_size(self.limits, encoded, query, self.runtime.manifest.num_layers,
                                 self.runtime.manifest.num_heads)
            outputs = await self._submit(ticket, "attention", [e.ids for e in encoded])
        return await self._off_loop(_attention_views, encoded, outputs, query)

    async def tokenize(self, inputs: Sequence[str], add_special_tokens: bool) -> list[list[dict[str, Any]]]:
        check_inputs(self.limits, inputs)
        encoded = await self._maybe_off_loop(inputs, self.runtime.tokenizer.encode_plain, inputs, add_special_tokens)
        return [token_list(e) for e in encoded]

    async def decode(self, sequences: Sequence[Sequence[int]], skip_special_tokens: bool) -> list[str]:
        check_inputs(self.limits, sequences)
        return await self._maybe_off_loop(sequences, self.runtime.tokenizer.decode, sequences, skip_special_tokens)

    def info(self) -> dict[str, Any]:
        m = self.runtime.manifest
        return {
            "model": m.name, "version": m.version, "created_at": m.created_at, "source": m.source.kind,
            "provider": self.runtime.provider, "variants": self.runtime.variants,
            "variant": {"served": self.runtime.variants.get("fast"), "reason": self.runtime.variant_reason},
            "graphs": [{"file": g.file, "kind": g.kind, "variant": g.variant, "sha256": g.sha256} for g in m.graphs],
            "tokenizer_sha256": m.tokenizer_sha256, "pooling": m.pooling, "normalize": m.normalize,
            "hidden_size": m.hidden_size, "num_layers": m.num_layers, "num_heads": m.num_heads,
            "max_length": m.max_length, "labels": list(m.labels),
        }

    # -- internals ---------------------------------------------------------------------------------
    async def _run(
        self, kind: str, inputs: Inputs, truncate: bool | None, direction: Direction,
    ) -> tuple[list[Encoded], list[dict[str, np.ndarray]]]:
        check_inputs(self.limits, inputs)
        with self.batcher.admit(len(inputs)) as ticket:
            encoded = await self._encode(inputs, truncate, direction)
            return encoded, await self._submit(ticket, kind, [e.ids for e in encoded])

    async def _run_windows(
        self, inputs: Inputs, overlap: int, name: str,
    ) -> tuple[list[list[chunking.Window]], list[np.ndarray]]:
        """Chunk (off the loop when large), admit every window (one permit each, all or none), run; per input
        its windows and their `name` outputs (K, D) or (K, C)."""
        check_inputs(self.limits, inputs, chunked=True)
        started = time.perf_counter()
        windows = await self._maybe_off_loop(
            inputs, chunking.cut, self.runtime.tokenizer, inputs, overlap, self.limits.max_windows_per_input,
        )
        self._tokenized(time.perf_counter() - started)
        flat = [w.ids for ws in windows for w in ws]
        with self.batcher.admit(len(flat)) as ticket:
            outputs = await self._submit(ticket, "fast", flat)
        grouped = chunking.regroup(outputs, windows)
        return windows, [np.stack([o[name] for o in outs]) for outs in grouped]

    def _tokenized(self, seconds: float) -> None:
        self._observer.tokenized(seconds)
        if (record := timing.current()) is not None:
            record.tokenized(seconds)

    async def _submit(self, ticket: Ticket, kind: str, sequences: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
        outputs = await self.batcher.submit(ticket, kind, sequences)
        if (record := timing.current()) is not None:
            record.ran(ticket.queue_s, ticket.inference_s)
        for index, output in enumerate(outputs):
            for name, value in output.items():
                if name != "attentions":  # checked once, on the map actually served, off the loop
                    check_finite(value, name, index)
        return outputs

    def _labels(self) -> list[str]:
        labels = list(self.runtime.manifest.labels)
        if not labels:
            raise Unsupported("this model has no classification head (manifest.json labels is empty)")
        return labels

    async def _encode(self, inputs: Inputs, truncate: bool | None, direction: Direction) -> list[Encoded]:
        cut = self.limits.truncate if truncate is None else truncate
        if isinstance(inputs[0], str):
            started = time.perf_counter()
            encoded = await self._maybe_off_loop(inputs, self.runtime.tokenizer.encode, inputs, cut, direction)
            self._tokenized(time.perf_counter() - started)
            return encoded
        return self.runtime.tokenizer.from_ids(inputs, cut, direction)  # type: ignore[arg-type]

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def _maybe_off_loop(self, texts: Inputs, fn: Callable[..., T], *args: Any) -> T:
        """Small requests inline (a thread hand-off costs more than the work), large ones off the loop."""
        if sum(len(text) for text in texts) < INLINE_TOKENIZE_CHARS:
            return fn(*args)
        return await self._off_loop(fn, *args)


def _tokens_run(windows: list[list[chunking.Window]]) -> int:
    return sum(w.length for ws in windows for w in ws)


def token_list(e: Encoded) -> list[dict[str, Any]]:
    return [
        {"id": int(i), "text": t, "start": a, "stop": b, "special": s}
        for i, t, (a, b), s in zip(e.ids.tolist(), e.tokens, e.offsets, e.special, strict=True)
    ]


def _attention_views(
    encoded: list[Encoded], outputs: list[dict[str, np.ndarray]], query: AttentionQuery,
) -> list[dict[str, Any]]:
    """Runs in the executor: select, aggregate, check finiteness of what is served (once), encode."""
    views = []
    for index, (e, out) in enumerate(zip(encoded, outputs, strict=True)):
        chosen = postprocess.select(out["attentions"], query.layers, query.heads)  # (l, h, n, n)
        maps = postprocess.aggregate(chosen, query.aggregation)
        check_finite(maps, "attentions", index)  # probabilities in [0, 1]: no overflow in the float16 cast
        views.append({
            "tokens": token_list(e), "shape": list(maps.shape),
            "attention": postprocess.encode_array(maps, query.encoding, query.dtype),
        })
    return views
