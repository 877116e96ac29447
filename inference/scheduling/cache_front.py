"""The answer cache in front of one model's graph runs (`inference.scheduling.cache` keeps the entries): cached answers
and texts' token ids looked up, repeats within a request run once, and an input that another request is running
now waited for instead of run again.

A waiting request gets that run's outputs, or its queue timeout (it waited as long), or, when the run failed
otherwise or was cancelled, looks in the cache and then runs the input itself. An interactive request never
waits for a bulk request's run (it runs its own, and takes the bulk run's place for those who come later).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np

from inference.errors import InputTooLong, QueueTimeout
from inference.limits import check_finite
from inference.runtime.graphs import BatchKind, Input, Outputs
from inference.runtime.tokenize import Direction, Encoded
from inference.scheduling import timing
from inference.scheduling.batcher import Batcher, Ticket
from inference.scheduling.cache import CACHED_KINDS, IDS, AnswerCache, frozen, key, text_key
from inference.scheduling.fairqueue import Caller, Priority
from inference.scheduling.observer import BatchObserver

Tokenize = Callable[[Sequence[str]], Awaitable[list[Encoded]]]
HashKeys = Callable[..., Awaitable[list[bytes]]]  # (fn, *args): fn(*args), on the event loop or off it


async def run_graph(
    batcher: Batcher, ticket: Ticket, kind: BatchKind, sequences: Sequence[Input], adapter: int = 0,
    urgent: bool = False,
) -> list[Outputs]:
    """One graph run through the batcher, around the cache: its queue and inference seconds go to the request's
    record, and every output but the maps is checked finite (a map is checked once it is answered, off the loop)."""
    outputs = await batcher.submit(ticket, kind, sequences, urgent, adapter)
    if (record := timing.current()) is not None:
        record.ran(ticket.queue_s, ticket.inference_s)
    for index, output in enumerate(outputs):
        for name, value in output.items():
            if name != "attentions":
                check_finite(value, name, index)
    return outputs


@dataclass
class SharedRun:
    """A graph run of one cached-kind input in flight, which other requests asking for that input wait for:
    its outputs, or the QueueTimeout it met."""

    future: asyncio.Future[Outputs | QueueTimeout]
    priority: Priority


class SharedAnswers:
    """One model's runs through the cache (shared by the models of a registry; entries are by fingerprint)."""

    def __init__(self, cache: AnswerCache, fingerprint: str, observer: BatchObserver, batcher: Batcher) -> None:
        self.cache, self.fingerprint, self._observer, self._batcher = cache, fingerprint, observer, batcher
        self._running: dict[bytes, SharedRun] = {}  # cached-kind inputs being run now, by cache key

    @property
    def on(self) -> bool:
        return self.cache.max_bytes > 0

    async def encode(
        self, texts: Sequence[str], max_length: int, cut: bool, direction: Direction, prompt: str, tokenize: Tokenize,
        hash_keys: HashKeys,
    ) -> list[Encoded]:
        """`texts` encoded: those whose token ids the cache keeps (by the fingerprint, `max_length`, `cut`,
        `direction`, `prompt` and the text) as those ids alone, the others by `tokenize` (each once), kept. The
        keys are hashed by `hash_keys` (off the event loop for a large request: up to 256 texts of 20,000
        characters)."""
        keys = await hash_keys(self._text_keys, texts, max_length, cut, direction, prompt)
        found = {k: Encoded(hit[IDS].astype(np.int64)) for k in set(keys) if (hit := self.cache.get(k)) is not None}
        new = {k: t for k, t in zip(keys, texts, strict=True) if k not in found}  # each new text once
        if new:
            try:
                fresh = await tokenize(list(new.values()))
            except InputTooLong:
                await tokenize(texts)  # raises it again, naming the input by its place in the request
                raise
            self._keep(list(new), [{IDS: e.ids.astype(np.int32)} for e in fresh])  # every vocabulary fits: half
            found |= dict(zip(new, fresh, strict=True))
        return [found[k] for k in keys]

    def _text_keys(self, texts: Sequence[str], max_length: int, cut: bool, direction: Direction,
                   prompt: str) -> list[bytes]:
        return [text_key(self.fingerprint, max_length, t, cut, direction, prompt) for t in texts]

    async def submit(
        self, ticket: Ticket, kind: BatchKind, sequences: Sequence[Input], adapter: int = 0,
    ) -> list[Outputs]:
        """Every sequence's outputs, in order, run with `adapter` (its index; 0 the base). Of the cached kinds, with
        the cache on: hits from the cache (their permits returned at once, never queued), sequences another
        request of a class at least as urgent is running now from that run, and each other distinct sequence run
        once and kept; otherwise all run."""
        if kind not in CACHED_KINDS or not self.on:
            return await run_graph(self._batcher, ticket, kind, sequences, adapter)
        keys = [key(self.fingerprint, kind, sequence, adapter) for sequence in sequences]
        found: dict[bytes, Outputs] = {k: hit for k in set(keys) if (hit := self.cache.get(k)) is not None}
        missing = {k: s for k, s in zip(keys, sequences, strict=True) if k not in found}  # first of each
        borrowed = {k: run for k in missing if (run := self._running.get(k)) is not None
                    and (run.priority == "interactive" or ticket.caller.priority == "bulk")}
        own = {k: s for k, s in missing.items() if k not in borrowed}
        ticket.give_back(len(sequences) - len(missing))  # a borrowed input keeps its permit until its run ends
        found |= await self._run_and_keep(ticket, kind, own, adapter)
        retry = {k: missing[k] for k in await self._borrow(borrowed, found) if k not in found}
        found |= await self._run_and_keep(ticket, kind, retry, adapter)
        ticket.give_back(len(borrowed) - len(retry))
        self._answered_cached(ticket.caller, len(sequences), len(own) + len(retry))
        return [found[k] for k in keys]

    async def _run_and_keep(
        self, ticket: Ticket, kind: BatchKind, own: dict[bytes, Input], adapter: int,
    ) -> dict[bytes, Outputs]:
        """Run `own` (sequences by key) and keep the outputs in the cache, as read-only copies detached from
        their batch. While they run, other requests asking for the same keys wait for this run (`_running`)
        instead of running them again: they get its outputs, or its queue timeout, or, if it failed otherwise
        or was cancelled, run them themselves. An interactive run takes the place of a bulk one there."""
        if not own:
            return {}
        loop = asyncio.get_running_loop()
        runs = {k: SharedRun(loop.create_future(), ticket.caller.priority) for k in own}
        for k, run in runs.items():
            if k not in self._running or run.priority == "interactive":
                self._running[k] = run
        try:
            ran = await run_graph(self._batcher, ticket, kind, list(own.values()), adapter)
        except QueueTimeout as timeout:
            for run in runs.values():
                run.future.set_result(timeout)  # those waiting for it waited as long
            raise
        else:
            kept = self._keep(list(own), ran)
            fresh = dict(zip(own, kept, strict=True))
            for k, run in runs.items():
                run.future.set_result(fresh[k])
            return fresh
        finally:
            for k, run in runs.items():
                run.future.cancel()  # failed or cancelled: the borrowers run it (a no-op once answered)
                if self._running.get(k) is run:
                    del self._running[k]

    async def _borrow(self, borrowed: dict[bytes, SharedRun], into: dict[bytes, Outputs]) -> list[bytes]:
        """Wait for the other requests' runs of `borrowed` (never cancelling them), their outputs into `into`
        (QueueTimeout when one of those runs waited out the queue timeout); the keys whose run failed or was
        cancelled, to run here unless the cache has them by now."""
        if borrowed:
            started = time.perf_counter()
            await asyncio.wait([run.future for run in borrowed.values()])
            if (record := timing.current()) is not None:
                record.ran(time.perf_counter() - started, 0.0)  # waited for another request's run: queue time
        again = []
        for k, run in borrowed.items():
            if run.future.cancelled():
                if (hit := self.cache.get(k)) is not None:
                    into[k] = hit
                else:
                    again.append(k)
            elif isinstance(answer := run.future.result(), QueueTimeout):
                raise QueueTimeout(str(answer))
            else:
                into[k] = answer
        return again

    def _keep(self, keys: list[bytes], values: Sequence[Outputs]) -> list[Outputs]:
        """`values` kept in the cache under `keys`, as read-only copies detached from their batch (returned)."""
        evictions, kept = self.cache.evictions, [frozen(v) for v in values]
        self.cache.put_all(keys, kept)
        self._observer.cache_size(self.cache.bytes, self.cache.evictions - evictions)
        return kept

    def _answered_cached(self, caller: Caller, inputs: int, ran: int) -> None:
        self._observer.cache(caller.name, inputs - ran, ran)
        if (record := timing.current()) is not None and inputs > ran:
            record.answered_cached(inputs - ran)
