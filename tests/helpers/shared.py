"""Session fixtures made once per run, whichever pytest process asks first.

`make test` runs the suite in pytest-xdist workers, and a session fixture is per process: without this, each
worker would export the same bundles again. `once(factory, name, build)` calls `build(directory)` for the first
worker that asks and hands its value (pickled beside what it built) to the others, which wait on a file lock
meanwhile. Without xdist it is `build(factory.mktemp(name))`.

The directory lives under the run's base temporary directory, the parent of every worker's own; pytest removes it
with the rest when the run passes (tmp_path_retention_policy).
"""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from filelock import FileLock

T = TypeVar("T")
M = TypeVar("M")
DONE = "value.pickle"  # written last: a directory without it was never finished (a failed or killed build)


def once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]) -> T:
    """`build(directory)`'s value, built once for the whole run in a fresh directory called `name`."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return build(factory.mktemp(name))
    directory = factory.getbasetemp().parent / "shared" / name
    directory.parent.mkdir(exist_ok=True)
    with FileLock(f"{directory}.lock"):
        done = directory / DONE
        if done.is_file():
            return pickle.loads(done.read_bytes())  # type: ignore[no-any-return]
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir()
        value = build(directory)
        done.write_bytes(pickle.dumps(value))
        return value


def reloaded(cls: type[M], source: Path) -> M:
    """The transformers model of class `cls` saved at `source`, loaded again as the tests' references are (eager
    attention, eval). A pickled transformers model comes back with its default attention, whose `attentions` are
    None: a value holding one (tests.helpers.exports.Exported, tests.helpers.heads.Case) pickles its class and
    loads it from its directory on the other side instead."""
    return cls.from_pretrained(source, attn_implementation="eager").eval()  # type: ignore[attr-defined, no-any-return]
