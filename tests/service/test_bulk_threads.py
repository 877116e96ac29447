"""Bulk work on threads of a lower CPU priority (inference.scheduling.slots): a bulk caller's graph runs and the
tokenising of its large requests run on niced threads of their own (under SCHED_IDLE unless
`bulk_idle_policy` is off), an interactive caller's on the normal ones, and `bulk_nice 0` leaves them all
alike. Whether that keeps the interactive p99 down under a bulk load
is measured in tests/reliability/test_traffic.py."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from inference.runtime.graphs import BatchKind, TokenSequence
from inference.runtime.loading import LoadedBundle
from inference.scheduling.slots import background_pool, lower_priority
from tests.helpers.serving import serving
from tests.helpers.tiny import SENTENCES
from tests.service.test_callers import bearer, entry, write

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a nice value per thread is Linux's")
LONG = " ".join(SENTENCES * 12)  # over the characters tokenised on the event loop: tokenised off it


def nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def policy() -> int:
    return os.sched_getscheduler(threading.get_native_id())


def priority() -> tuple[int, int]:
    return nice(), policy()


@dataclasses.dataclass
class Recording(LoadedBundle):
    """The real bundle; every graph run and tokenising call records (thread name, its nice value)."""

    where: list[tuple[str, str, tuple[int, int]]] = dataclasses.field(default_factory=list)

    @classmethod
    def around(cls, loaded: LoadedBundle) -> Recording:
        fake = cls(**{f.name: getattr(loaded, f.name) for f in dataclasses.fields(LoadedBundle)})
        encode, where = fake.tokenizer.encode, fake.where

        def recorded(*args: Any, **kwargs: Any) -> Any:
            where.append(("tokenise", threading.current_thread().name, priority()))
            return encode(*args, **kwargs)

        fake.tokenizer.encode = recorded  # type: ignore[method-assign]
        return fake

    def run_batch(
        self, kind: BatchKind, sequences: list[TokenSequence], adapters: Sequence[int] | None = None,
    ) -> Sequence[Any]:
        self.where.append(("graph", threading.current_thread().name, priority()))
        return super().run_batch(kind, sequences, adapters)


def test_a_thread_lowers_its_own_priority_only() -> None:
    before, seen = priority(), []
    thread = threading.Thread(target=lambda: (lower_priority(5), seen.append(priority())))
    thread.start()
    thread.join()
    assert seen == [(min(19, before[0] + 5), before[1])] and priority() == before
    idle = background_pool(1, "idle", 19, idle=True)
    assert idle.submit(priority).result() == (19, os.SCHED_IDLE)
    niced = background_pool(1, "low", 19)
    assert niced.submit(priority).result() == (19, before[1])
    unchanged = background_pool(1, "same", 0, idle=True)  # nothing lowered: not idle either
    assert unchanged.submit(priority).result() == before
    for pool in (idle, niced, unchanged):
        pool.shutdown()


def test_a_refused_idle_policy_leaves_the_thread_niced_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    def refused(*args: Any) -> None:
        raise PermissionError("not here")

    monkeypatch.setattr(os, "sched_setscheduler", refused)
    before, pool = priority(), background_pool(1, "refused", 19, idle=True)
    assert pool.submit(priority).result() == (19, before[1])
    pool.shutdown()
    assert "bulk threads keep the normal scheduling policy (niced only): not here" in caplog.text


@pytest.mark.parametrize(("bulk_nice", "idle"), [(19, True), (19, False), (0, True)])
async def test_bulk_callers_work_on_lowered_threads_interactive_ones_on_the_normal_ones(
    tiny_bundle: Path, tmp_path: Path, bulk_nice: int, idle: bool,
) -> None:
    keys = write(tmp_path / "keys.toml", entry("search", "search-key"), entry("backfill", "bulk-key", "bulk"))
    base = priority()
    lowered = (min(19, base[0] + bulk_nice), os.SCHED_IDLE if idle and bulk_nice else base[1])
    async with serving(tiny_bundle, Recording.around, api_keys_file=keys, bulk_nice=bulk_nice,
                       bulk_idle_policy=idle, cache_bytes=0, intra_op_threads=1) as (app, client):
        where = app.state.models.default.bundle.where
        for key, caller in (("bulk-key", "bulk"), ("search-key", "interactive")):
            where.clear()
            answer = await client.post("/embed", json={"inputs": [LONG, SENTENCES[0]]}, headers=bearer(key))
            assert answer.status_code == 200
            assert [w[0] for w in where] == ["tokenise", "graph"], where
            (_, tokenised_on, tokenise_priority), (_, ran_on, graph_priority) = where
            if caller == "bulk":
                assert tokenised_on.startswith("attnserve-bulk-cpu") and ran_on.startswith("attnserve-bulk_")
                assert tokenise_priority == graph_priority == lowered
            else:
                assert tokenised_on.startswith("attnserve-cpu") and ran_on.startswith("attnserve-graph")
                assert tokenise_priority == graph_priority == base
