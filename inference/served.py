"""One served model: its loaded bundle, its batcher and its request limits, and the one path every request
takes through them (`run`). What a caller may ask of a model is in `inference.tasks.embed` and
`inference.tasks.attention`, answered in the types of `inference.results`.

A request is checked (`inference.limits`: counts, characters), admitted to the batcher once, taking one
permit per input for each graph it runs (or refused at once), tokenised once (on the event loop when small:
a hand-off to the executor costs more than encoding a few short texts; off the loop otherwise); the caps on
the size of its answer are checked against the token counts before any graph runs; then its inputs are
queued. A chunked request is cut first, since its windows are only known then; each window then takes one
permit and runs as its own input (`inference.chunking`). Inputs are texts, token-id lists or text pairs (a
query and a document, through the tokenizer's pair template, with their token type ids); an image model's are images
(`run_images`: their bytes, checked by count and size, admitted, then decoded and prepared off the loop by the
bundle's steps in place of tokenising, each queued as its tokens).

Admission and the queue are the request's caller's (its priority class and fairness key, from the request's record:
`inference.scheduling.timing`). Inputs of the cached kinds are looked up in the answer cache first
(`inference.scheduling.cache`, through `inference.scheduling.cache_front`): a hit returns its permit at once and
never queues, a repeat of another input of the same request runs once, an input that another request is running now
waits for that run (unless that request is bulk and this one interactive), and what runs is kept for the next
request. A request whose graphs are all of the cached kinds takes the token ids of texts seen before from the cache
too, without tokenising them again. With the cache off (0 bytes) every input is tokenised and runs, repeats too.

A bundle with LoRA adapters (the manifest's `adapters`; a request's `task` on the wire) is served by one
`ServedModel`; `with_adapter(name)` gives a view of it whose every graph run carries that adapter's index, so
a request made through the view runs with the adapter whatever it asks for (vectors, windows, pairs, maps),
while its inputs share batches, permits and the answer cache (keyed by the adapter too) with every other.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from typing import Any, TypeVar

from inference import chunking, rules
from inference.chunking import Window
from inference.errors import InferenceError, NotReady, UnknownAdapter, Unsupported
from inference.limits import Inputs, check_images, check_inputs
from inference.options import RequestLimits
from inference.runtime.graphs import ATTENTION, FAST, MULTI, VIEWS, BatchKind, Input, Outputs, TokenSequence
from inference.runtime.loading import LoadedBundle
from inference.runtime.tokenize import Direction, Encoded
from inference.scheduling import timing
from inference.scheduling.batcher import Batcher, Ticket
from inference.scheduling.cache import CACHED_KINDS, AnswerCache
from inference.scheduling.cache_front import SharedAnswers, run_graph
from inference.scheduling.fairqueue import Caller
from inference.scheduling.observer import BatchObserver

T = TypeVar("T")
Check = Callable[[list[Encoded]], None]  # a cap checked on the token counts before any graph runs
Cut = Callable[..., list[list[Window]]]  # (tokenizer, inputs, overlap, max_windows) -> per input, its windows
Follow = Callable[[Ticket, list[list[Window]], list[list[Outputs]]], Awaitable[T]]  # more runs, same admission
WARM_UP_BATCH, WARM_UP_TOKENS = 8, 128  # the shape warm-up runs the fast graph at (attention: 1 x 128)
INLINE_TOKENIZE_CHARS = 2_000  # requests with fewer characters in all are tokenised on the event loop (~tens of us)


class ServedModel:
    def __init__(
        self, name: str, bundle: LoadedBundle, batcher: Batcher, limits: RequestLimits, executor: Executor,
        observer: BatchObserver | None = None, answers: AnswerCache | None = None, background: Executor | None = None,
    ) -> None:
        self.name, self.bundle, self.batcher = name, bundle, batcher
        self.limits = limits.for_model(bundle.manifest.max_length)  # the character caps of this model
        self._executor, self._observer = executor, observer or BatchObserver()
        self._background = background or executor  # bulk requests' tokenising (a lower CPU priority)
        self.answers = answers if answers is not None else AnswerCache(0)  # shared by the models of a registry
        self.fingerprint = bundle.fingerprint
        self.warm = False
        self.adapter: str | None = None  # the LoRA adapter this model's runs use (None: the bare base): with_adapter
        self.adapter_index = 0  # the index its graph runs feed as `adapter` (0: the base; i + 1: adapters[i])
        self._probe = asyncio.Lock()
        self._shared = SharedAnswers(self.answers, self.fingerprint, self._observer, batcher)
        self.image_tower: ServedModel | None = None  # a two-tower model's image encoder (inference.registry)

    def for_images(self) -> ServedModel:
        """The model this one's images go to: itself, or a two-tower model's image tower."""
        return self.image_tower if self.image_tower is not None else self

    @property
    def modalities(self) -> tuple[str, ...]:
        """What the model reads: text, image or both (`LoadedBundle.modalities`)."""
        return self.bundle.modalities

    @property
    def tasks(self) -> frozenset[str]:
        """What this model can be asked (`LoadedBundle.tasks`)."""
        return self.bundle.tasks

    @property
    def multi_outputs(self) -> frozenset[str]:
        return self.bundle.multi_outputs

    def require(self, task: str, what: str | None = None) -> None:
        """Unsupported (422) naming what this model can do, unless it can `task`."""
        if task not in self.tasks:
            raise Unsupported(f"model {self.name} cannot {what or task.replace('_', ' ')}; it can: "
                              f"{', '.join(sorted(self.tasks))} (GET /info lists each model's tasks)")

    @property
    def adapters(self) -> tuple[str, ...]:
        """The bundle's LoRA adapters by name, in index order (adapters[i] is index i + 1; 0 the bare base)."""
        return tuple(adapter.name for adapter in self.bundle.manifest.adapters)

    def with_adapter(self, name: str | None) -> ServedModel:
        """This model with every graph run carrying adapter `name` (None, or the one it runs: itself): a shallow
        copy sharing the batcher, sessions, admission and cache. UnknownAdapter (422) for a name the model does not
        have (`inference.rules.adapter_index`), and for another name than a view's own."""
        if name is None or name == self.adapter:
            return self
        if self.adapter is not None:
            raise UnknownAdapter(f"the request names two tasks for model {self.name}: {self.adapter!r} and "
                                 f"{name[:64]!r}", code="task_conflict")
        view = copy.copy(self)
        view.adapter, view.adapter_index = name, rules.adapter_index(self.bundle.manifest, name, self.name)
        return view

    @property
    def ready(self) -> bool:
        return self.warm and self.batcher.last_ok and (self.image_tower is None or self.image_tower.ready)

    async def check_ready(self) -> bool:
        """`ready`, but after a failed inference one small probe run (one at a time) checks whether the
        graph works again, so readiness recovers by itself once a fault clears, traffic or not."""
        if self.warm and not self.batcher.last_ok and not self._probe.locked():
            async with self._probe:
                with contextlib.suppress(InferenceError):  # still failing (or busy): stay not ready
                    await self._probe_run()
        if self.image_tower is not None:
            await self.image_tower.check_ready()
        return self.ready

    async def _probe_run(self) -> None:
        """One small run of the fast graph, around the cache (a cached answer proves nothing)."""
        with self.batcher.admit(1) as ticket:
            await run_graph(self.batcher, ticket, FAST, self.bundle.probe_inputs(1, "ready probe"), urgent=True)

    async def ensure_ready(self) -> None:
        """NotReady unless warm and its inference works (after a failure, a probe run decides)."""
        if not await self.check_ready():
            state = "warming up" if not self.warm else "the last inference failed"
            raise NotReady(f"model {self.name}: {state}")

    async def warm_up(self) -> None:
        """Runs of each graph at a realistic shape before the model counts as ready (kernel choice, caches, the
        weights' pages): the fast graph at batch 8 x 128 tokens, the attention graph at 1 x 128. Then each arena gives
        back what those runs grew it to (LoadedBundle.shrink_arenas), and the mapped weights' pages go back too."""
        text = " ".join(["warm up"] * (WARM_UP_TOKENS // 2 - 1))  # 126 word pieces + [CLS] and [SEP]
        for graph in self.bundle.graphs:  # not a request: the request limits (inputs, characters) do not apply
            kind = BatchKind(graph)
            if kind in VIEWS or kind == MULTI:
                continue  # the fast graph's session: warmed as FAST
            batch = 1 if kind == ATTENTION else min(WARM_UP_BATCH, self.batcher.limits.max_queue)
            with self.batcher.admit(batch) as ticket:
                await run_graph(self.batcher, ticket, kind, self.bundle.probe_inputs(batch, text), urgent=True)
        if self.image_tower is not None:
            await self.image_tower.warm_up()
        await asyncio.to_thread(self.bundle.shrink_arenas)  # no request runs before `warm`
        self.bundle.release_pages()  # what the runs read, an attention graph's every weight, stays in the page cache
        self.warm = True  # runs above are not cached

    async def stop(self) -> None:
        """Stop the batchers (this model's, its image tower's): admitted work is finished first."""
        await self.batcher.stop()
        if self.image_tower is not None:
            await self.image_tower.stop()

    def drain(self) -> None:
        """Shutdown has begun: every batcher runs what waits at once (`Batcher.drain`)."""
        self.batcher.drain()
        if self.image_tower is not None:
            self.image_tower.drain()

    # -- the one path of a request -----------------------------------------------------------------
    async def run(
        self, inputs: Inputs, kinds: Sequence[BatchKind], truncate: bool | None = None,
        direction: Direction = "right", check: Check | None = None, prompt: str = "",
    ) -> tuple[list[Encoded], dict[BatchKind, list[Outputs]]]:
        """Check, admit once (a permit per input and graph), tokenise once (texts after `prompt`), check
        `check`'s cap, then run every input as each batch kind of `kinds` (at once: their inputs queue together)."""
        check_inputs(self.limits, inputs)
        with self.batcher.admit(len(inputs) * len(kinds), self._caller()) as ticket:
            encoded = await self._encode(inputs, truncate, direction, prompt, known=set(kinds) <= CACHED_KINDS)
            if check is not None:
                check(encoded)
            paired = any(isinstance(item, tuple) for item in inputs)
            sequences = [TokenSequence.of(e.ids, e.type_ids if paired else None) for e in encoded]  # a pair's type ids
            self._admitted(sum(e.length for e in encoded))
            runs = await all_or_none([self.submit(ticket, kind, sequences) for kind in kinds])
        return encoded, dict(zip(kinds, runs, strict=True))

    async def run_images(self, images: Sequence[bytes], kinds: Sequence[BatchKind]) -> dict[BatchKind, list[Outputs]]:
        """An image model's `run`: check the images' count and bytes, admit once (a permit per image and graph),
        decode and prepare them by the bundle's steps off the event loop (InvalidImage names the input), then run
        every image as each batch kind of `kinds`."""
        check_images(self.limits, images)
        with self.batcher.admit(len(images) * len(kinds), self._caller()) as ticket:
            started = time.perf_counter()
            sequences = await self.off_loop(self.bundle.prepare_images, images, self.limits.max_image_pixels, self.name)
            self._tokenized(time.perf_counter() - started)
            self._admitted(sum(len(s) for s in sequences))
            runs = await all_or_none([self.submit(ticket, kind, sequences) for kind in kinds])
        return dict(zip(kinds, runs, strict=True))

    async def run_sequences(
        self, sequences: list[TokenSequence], kinds: Sequence[BatchKind],
    ) -> dict[BatchKind, list[Outputs]]:
        """Sequences the caller made itself from checked inputs (with type ids, or with which tokens are attended:
        inference.runtime.graphs), admitted once (a permit per sequence and graph) and run as each batch kind of
        `kinds`."""
        with self.batcher.admit(len(sequences) * len(kinds), self._caller()) as ticket:
            self._admitted(sum(len(s) for s in sequences))
            runs = await all_or_none([self.submit(ticket, kind, sequences) for kind in kinds])
        return dict(zip(kinds, runs, strict=True))

    async def run_windows(
        self, inputs: Inputs, overlap: int, prompt: str = "",
    ) -> tuple[list[list[Window]], list[list[Outputs]]]:
        """Cut every input (texts after `prompt`) into windows (off the loop when large), admit every window (one
        permit each, all or none), run them through the fast graph; per input, its windows and their outputs."""
        cut = functools.partial(chunking.cut, prompt=prompt) if prompt else chunking.cut
        windows, grouped, _ = await self.run_cut(inputs, overlap, FAST, cut)
        return windows, grouped

    async def run_cut(
        self, inputs: Inputs, overlap: int, kind: BatchKind, cut: Cut = chunking.cut, follow: Follow[T] | None = None,
        follow_permits: Callable[[list[list[Window]]], int] = lambda windows: 0,
    ) -> tuple[list[list[Window]], list[list[Outputs]], T | None]:
        """`run_windows` with the cut and the batch kind chosen (text pairs: the query in every window), and
        `follow`'s runs (e.g. attention on the best windows) inside the same admission: its permits
        (`follow_permits` of the windows) are taken with the windows', all or none."""
        check_inputs(self.limits, inputs, chunked=True)
        started = time.perf_counter()
        windows = await self.maybe_off_loop(
            _texts(inputs), cut, self.bundle.tokenizer, inputs, overlap, self.limits.max_windows_per_input,
        )
        self._tokenized(time.perf_counter() - started)
        flat = [w.sequence for ws in windows for w in ws]
        with self.batcher.admit(len(flat) + follow_permits(windows), self._caller()) as ticket:
            self._admitted(sum(len(s) for s in flat))
            grouped = chunking.regroup(await self.submit(ticket, kind, flat), windows)
            followed = await follow(ticket, windows, grouped) if follow is not None else None
        return windows, grouped, followed

    async def submit(self, ticket: Ticket, kind: BatchKind, sequences: Sequence[Input]) -> list[Outputs]:
        """Every sequence's outputs, in order, run with this model's adapter (of the cached kinds, through the
        cache: `inference.scheduling.cache_front`)."""
        return await self._shared.submit(ticket, kind, sequences, self.adapter_index)

    async def off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        executor = self._background if self._caller().priority == "bulk" else self._executor
        return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)

    async def maybe_off_loop(self, texts: Inputs, fn: Callable[..., T], *args: Any) -> T:
        """Small requests inline (a thread hand-off costs more than the work), large ones off the loop."""
        if _inline(texts):
            return fn(*args)
        return await self.off_loop(fn, *args)

    def _tokenized(self, seconds: float) -> None:
        self._observer.tokenized(self._caller().name, seconds)
        if (record := timing.current()) is not None:
            record.tokenized(seconds)

    @staticmethod
    def _caller() -> Caller:
        """The caller of the request being handled (the default caller outside a request)."""
        record = timing.current()
        return record.caller if record is not None else Caller()

    @staticmethod
    def _admitted(tokens: int) -> None:
        if (record := timing.current()) is not None:
            record.admitted(tokens)

    async def _encode(
        self, inputs: Inputs, truncate: bool | None, direction: Direction, prompt: str, known: bool = False,
    ) -> list[Encoded]:
        """The inputs' encodings; `known` (every graph run is of a cached kind, which needs the ids only): texts
        whose ids the cache keeps come from there, as ids alone, and the others' ids are kept."""
        cut = self.limits.truncate if truncate is None else truncate
        if any(isinstance(item, tuple) for item in inputs):  # pairs, or pairs and texts (TEI's /predict)
            started = time.perf_counter()
            pairs = await self.maybe_off_loop(inputs, self.bundle.tokenizer.encode_pairs, inputs, cut, direction)
            self._tokenized(time.perf_counter() - started)
            return pairs
        if isinstance(inputs[0], str):
            started = time.perf_counter()
            encoded = await self._encode_texts(inputs, cut, direction, prompt, known)  # type: ignore[arg-type]
            self._tokenized(time.perf_counter() - started)
            return encoded
        return self.bundle.tokenizer.from_ids(inputs, cut, direction)  # type: ignore[arg-type]

    async def _encode_texts(
        self, texts: Sequence[str], cut: bool, direction: Direction, prompt: str, known: bool,
    ) -> list[Encoded]:
        tokenize = functools.partial(self._tokenize, cut=cut, direction=direction, prompt=prompt)
        if not (known and self._shared.on):
            return await tokenize(texts)
        hash_keys = functools.partial(self.maybe_off_loop, texts)  # a large request's keys off the loop
        return await self._shared.encode(texts, self.bundle.tokenizer.max_length, cut, direction, prompt, tokenize,
                                         hash_keys)

    async def _tokenize(self, texts: Sequence[str], cut: bool, direction: Direction, prompt: str) -> list[Encoded]:
        return await self.maybe_off_loop(texts, self.bundle.tokenizer.encode, texts, cut, direction, prompt)


def _inline(inputs: Inputs) -> bool:
    """Small enough to tokenise on the event loop."""
    return sum(len(text) for text in _texts(inputs)) < INLINE_TOKENIZE_CHARS


def _texts(inputs: Inputs) -> list[Any]:
    """The texts of `inputs` (both of each pair), or token-id lists as given: what their size is counted on."""
    return [text for item in inputs for text in (item if isinstance(item, tuple) else (item,))]


async def all_or_none(runs: Sequence[Awaitable[T]]) -> list[T]:
    """Every run's result, in order; when one fails, the others are cancelled and awaited before its error is
    raised, so no graph run of a failed request is left queued (or holding its inputs) after it answered. One run is
    awaited as it is (no task, nothing else to cancel): most requests run one graph."""
    if len(runs) == 1:
        return [await runs[0]]
    tasks = [asyncio.ensure_future(run) for run in runs]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
