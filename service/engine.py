"""The operations the routes expose: embed, classify, attention, tokenize. Plain asyncio + numpy.

Each request is checked (count, characters), admitted to the batcher as one permit per input (or
refused at once), tokenised in one batch (on the event loop when small: a hand-off to the executor
costs more than encoding a few short texts; off the loop otherwise), queued, and post-processed.
Errors are domain errors from `service.errors`; nothing here knows about HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from service import postprocess
from service.batcher import Batcher, BatchObserver, Ticket
from service.errors import (
    AttentionTooLarge,
    InputTooLong,
    InvalidRequest,
    NonFiniteOutput,
    ServiceError,
    TooManyInputs,
    Unsupported,
)
from service.runtime import Runtime
from service.tokenize import Direction, Encoded

T = TypeVar("T")
Inputs = Sequence[str] | Sequence[Sequence[int]]
TOKEN_JSON_BYTES = 96  # upper bound for one token's {id, text, start, stop, special} in a response
WARM_UP_BATCH, WARM_UP_TOKENS = 8, 128  # the shape warm-up runs the fast graph at (attention: 1 x 128)
INLINE_TOKENIZE_CHARS = 2_000  # requests with fewer characters in all are tokenised on the event loop (~tens of us)


@dataclass(frozen=True)
class EngineLimits:
    max_inputs: int
    max_input_chars: int
    truncate: bool
    attention_cap_bytes: int


@dataclass(frozen=True)
class AttentionQuery:
    layers: list[int] | None
    heads: list[int] | None
    aggregation: str
    encoding: str
    dtype: str


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
            batch = 1 if kind == "attention" else min(WARM_UP_BATCH, self.batcher.limits.max_queue)
            encoded = self.runtime.tokenizer.encode([text] * batch, truncate=True)
            with self.batcher.admit(batch) as ticket:
                await self._submit(ticket, kind, encoded)
        self.warm = True

    async def embed(
        self, inputs: Inputs, *, truncate: bool | None, direction: Direction, normalize: bool, dimensions: int | None,
    ) -> tuple[np.ndarray, int]:
        """(N, D') embeddings and the number of prompt tokens."""
        hidden = self.runtime.manifest.hidden_size
        if dimensions is not None and not 1 <= dimensions <= hidden:
            raise InvalidRequest(f"dimensions must be between 1 and the model's {hidden}")
        encoded, outputs = await self._run("fast", inputs, truncate, direction)
        vectors = np.stack([o["embeddings"] for o in outputs])  # (N, D)
        return postprocess.embeddings(vectors, normalize, dimensions), sum(e.length for e in encoded)

    async def classify(
        self, inputs: Sequence[str], *, truncate: bool | None, direction: Direction,
        top_k: int | None, raw_scores: bool,
    ) -> list[list[dict[str, object]]]:
        labels = self.runtime.manifest.labels
        if not labels:
            raise Unsupported("this model has no classification head (manifest.json labels is empty)")
        _, outputs = await self._run("fast", inputs, truncate, direction)
        logits = np.stack([o["logits"] for o in outputs])  # (N, C)
        return postprocess.top_labels(logits if raw_scores else postprocess.softmax(logits), labels, top_k)

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
        self._check_indices(query)
        self._check_inputs(inputs)
        with self.batcher.admit(len(inputs)) as ticket:
            encoded = await self._encode(inputs, truncate, direction)
            self._check_attention_size(encoded, query)
            outputs = await self._submit(ticket, "attention", encoded)
        return await self._off_loop(_attention_views, encoded, outputs, query)

    async def tokenize(self, inputs: Sequence[str], add_special_tokens: bool) -> list[list[dict[str, Any]]]:
        self._check_inputs(inputs)
        encoded = await self._maybe_off_loop(inputs, self.runtime.tokenizer.encode_plain, inputs, add_special_tokens)
        return [token_list(e) for e in encoded]

    def info(self) -> dict[str, Any]:
        m = self.runtime.manifest
        return {
            "model": m.name, "version": m.version, "created_at": m.created_at, "source": m.source.kind,
            "provider": self.runtime.provider, "variants": self.runtime.variants,
            "graphs": [{"file": g.file, "kind": g.kind, "variant": g.variant, "sha256": g.sha256} for g in m.graphs],
            "tokenizer_sha256": m.tokenizer_sha256, "pooling": m.pooling, "normalize": m.normalize,
            "hidden_size": m.hidden_size, "num_layers": m.num_layers, "num_heads": m.num_heads,
            "max_length": m.max_length, "labels": list(m.labels),
        }

    # -- internals ---------------------------------------------------------------------------------
    async def _run(
        self, kind: str, inputs: Inputs, truncate: bool | None, direction: Direction,
    ) -> tuple[list[Encoded], list[dict[str, np.ndarray]]]:
        self._check_inputs(inputs)
        with self.batcher.admit(len(inputs)) as ticket:
            encoded = await self._encode(inputs, truncate, direction)
            return encoded, await self._submit(ticket, kind, encoded)

    async def _submit(self, ticket: Ticket, kind: str, encoded: list[Encoded]) -> list[dict[str, np.ndarray]]:
        outputs = await self.batcher.submit(ticket, kind, [e.ids for e in encoded])
        for index, output in enumerate(outputs):
            for name, value in output.items():
                if name != "attentions":  # checked once, on the map actually served, off the loop
                    _check_finite(value, name, index)
        return outputs

    def _check_inputs(self, inputs: Inputs) -> None:
        if not inputs:
            raise InvalidRequest("inputs must not be empty")
        if len(inputs) > self.limits.max_inputs:
            raise TooManyInputs(
                f"{len(inputs)} inputs exceed the limit of {self.limits.max_inputs} per request (ATTNSERVE_MAX_INPUTS)"
            )
        for index, text in enumerate(inputs):
            if isinstance(text, str) and len(text) > self.limits.max_input_chars:
                raise InputTooLong(
                    f"input {index} has {len(text)} characters, over the limit of {self.limits.max_input_chars} "
                    "(ATTNSERVE_MAX_INPUT_CHARS)"
                )

    async def _encode(self, inputs: Inputs, truncate: bool | None, direction: Direction) -> list[Encoded]:
        cut = self.limits.truncate if truncate is None else truncate
        if isinstance(inputs[0], str):
            started = time.perf_counter()
            encoded = await self._maybe_off_loop(inputs, self.runtime.tokenizer.encode, inputs, cut, direction)
            self._observer.tokenized(time.perf_counter() - started)
            return encoded
        return self.runtime.tokenizer.from_ids(inputs, cut, direction)  # type: ignore[arg-type]

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def _maybe_off_loop(self, texts: Inputs, fn: Callable[..., T], *args: Any) -> T:
        """Small requests inline (a thread hand-off costs more than the work), large ones off the loop."""
        if sum(len(text) for text in texts) < INLINE_TOKENIZE_CHARS:
            return fn(*args)
        return await self._off_loop(fn, *args)

    def _check_indices(self, query: AttentionQuery) -> None:
        m = self.runtime.manifest
        for name, chosen, size in (("layers", query.layers, m.num_layers), ("heads", query.heads, m.num_heads)):
            if chosen is not None and (not chosen or min(chosen) < 0 or max(chosen) >= size):
                raise InvalidRequest(f"{name} must be a non-empty list of indices in [0, {size})")

    def _check_attention_size(self, encoded: list[Encoded], query: AttentionQuery) -> None:
        m = self.runtime.manifest
        layers = len(query.layers) if query.layers is not None else m.num_layers
        heads = len(query.heads) if query.heads is not None else m.num_heads
        total = 0
        for e in encoded:
            count = int(np.prod(postprocess.aggregated_shape(layers, heads, e.length, query.aggregation)))
            total += postprocess.estimated_bytes(count, query.encoding, query.dtype) + TOKEN_JSON_BYTES * e.length
        cap = self.limits.attention_cap_bytes
        if total > cap:
            raise AttentionTooLarge(
                f"the attention response would take about {total} bytes, over the cap of {cap} bytes "
                "(ATTNSERVE_ATTENTION_CAP_BYTES); ask for fewer inputs, layers or heads, or aggregate them"
            )


def token_list(e: Encoded) -> list[dict[str, Any]]:
    return [
        {"id": int(i), "text": t, "start": a, "stop": b, "special": s}
        for i, t, (a, b), s in zip(e.ids.tolist(), e.tokens, e.offsets, e.special, strict=True)
    ]


def _check_finite(value: np.ndarray, name: str, index: int) -> None:
    if not np.isfinite(value).all():
        raise NonFiniteOutput(f"the model produced NaN or Inf in {name} for input {index}")


def _attention_views(
    encoded: list[Encoded], outputs: list[dict[str, np.ndarray]], query: AttentionQuery,
) -> list[dict[str, Any]]:
    """Runs in the executor: select, aggregate, check finiteness of what is served (once), encode."""
    views = []
    for index, (e, out) in enumerate(zip(encoded, outputs, strict=True)):
        chosen = postprocess.select(out["attentions"], query.layers, query.heads)  # (l, h, n, n)
        maps = postprocess.aggregate(chosen, query.aggregation)
        _check_finite(maps, "attentions", index)  # probabilities in [0, 1]: no overflow in the float16 cast
        views.append({
            "tokens": token_list(e), "shape": list(maps.shape),
            "attention": postprocess.encode_array(maps, query.encoding, query.dtype),
        })
    return views
