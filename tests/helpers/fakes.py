"""Test doubles of a loaded bundle, injected with `create_app(settings, loaded)` (or `serving(bundle,
wrap=...)`), so production code carries no test hooks.

    GatedBundle    the real loaded bundle whose graph runs wait at a gate and may be made to fail
    Counting       a tokenizer that counts the calls that tokenise
    held(...)      hold the graph: one "plug" request blocks the only graph thread, so everything sent
                   meanwhile waits in the queue and runs as shared batches once released
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI

from inference.runtime.graphs import BatchKind, TokenSequence
from inference.runtime.loading import LoadedBundle
from tests.helpers.serving import until


@dataclasses.dataclass
class GatedBundle(LoadedBundle):
    """Delegates to the real sessions; `gate` (a threading.Event) must be set for a run to start, and
    `fault`, when set, is called before each run and may raise."""

    gate: threading.Event = dataclasses.field(default_factory=threading.Event)
    waiting: int = 0  # graph runs blocked at the gate right now
    fault: Callable[[], None] | None = None

    @classmethod
    def around(cls, loaded: LoadedBundle) -> GatedBundle:
        fake = cls(**{f.name: getattr(loaded, f.name) for f in dataclasses.fields(LoadedBundle)})
        fake.gate.set()
        return fake

    def run_batch(
        self, kind: BatchKind, sequences: list[TokenSequence], adapters: Sequence[int] | None = None,
    ) -> Sequence[Any]:
        self.waiting += 1
        try:
            self.gate.wait(60)
        finally:
            self.waiting -= 1
        if self.fault is not None:
            self.fault()
        return super().run_batch(kind, sequences, adapters)


def _plugs() -> Iterator[str]:
    """Texts that tokenise to ids no other plug has (words of the tiny vocabulary, by the bits of a count): a
    plug that were an answer cache hit would not hold the graph."""
    for n in itertools.count():
        yield "the plug " + " ".join(("a", "the")[int(bit)] for bit in f"{n:b}")


_PLUGS = _plugs()


@asynccontextmanager
async def held(
    app: FastAPI, client: httpx.AsyncClient, headers: dict[str, str] | None = None,
) -> AsyncIterator[asyncio.Task[httpx.Response]]:
    """While inside, graph runs are held: a plug request (one input, sent with `headers`) occupies the graph
    thread, and what is submitted meanwhile queues (`batcher.depth` counts it). On exit the gate opens; the
    queued inputs then form batches as they would under load. Yields the plug's task (its answer is a 200)."""
    gated: GatedBundle = app.state.models.default.bundle
    gated.gate.clear()
    plug = asyncio.create_task(client.post("/embed", json={"inputs": next(_PLUGS)}, headers=headers))
    try:
        await until(lambda: gated.waiting == 1)
        yield plug
    finally:
        gated.gate.set()


class Counting:
    """Wraps the tokenizer: counts every call that tokenises."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer, self.calls = tokenizer, 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._tokenizer, name)
        if name in ("encode", "encode_plain", "from_ids"):
            def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls += 1
                return attr(*args, **kwargs)
            return counted
        return attr
