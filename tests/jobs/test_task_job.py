"""`attnserve embed --task NAME` on a bundle with LoRA adapters (tests.helpers.tasks): every row runs with the
adapter (and its like-named prompt), bit for bit the server's answer to a request naming that task, and equal to
transformers + PEFT; chunked windows run with it too; a task the model does not have stops the job (exit 2)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import numpy as np

from jobs.cli import main
from tests.helpers.serving import post_ok, serving, worst
from tests.helpers.tasks import PROMPTS, TaskReference
from tests.jobs.corpus import output, vectors, write

TEXTS = ["the first document", "a second, somewhat longer document about films", "3", "the last one"]


def _embed(bundle: Path, inputs: Path, out: Path, *flags: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return main([str(inputs), "--bundle", str(bundle), "--out", str(out), "--intra-op-threads", "1", *flags])


async def test_task_vectors_are_the_servers_and_pefts(task_bundle: Path, task_model: Any, tmp_path: Path) -> None:
    inputs = write(tmp_path / "docs.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(TEXTS)])
    reference = TaskReference(task_model)
    async with serving(task_bundle, intra_op_threads=1, cache_bytes=0) as (_, client):
        for task in ("retrieval.query", "text-matching"):
            assert _embed(task_bundle, inputs, tmp_path / task, "--task", task) == 0
            ours = vectors(output(tmp_path / task))  # (N, D), ids d0..d3 in order
            served = np.asarray(await post_ok(client, "/embed", {"inputs": TEXTS, "task": task}), dtype=np.float32)
            assert np.array_equal(ours, served)
            assert worst(ours, reference.unit(TEXTS, task, PROMPTS.get(task, ""))) <= 1e-5
        chunked = {"inputs": TEXTS, "task": "retrieval.passage", "chunking": "mean", "chunk_overlap": 4}
        served = np.asarray(await post_ok(client, "/embed", chunked), dtype=np.float32)
    flags = ("--task", "retrieval.passage", "--chunking", "mean", "--chunk-overlap", "4")
    assert _embed(task_bundle, inputs, tmp_path / "chunked", *flags) == 0
    assert np.array_equal(vectors(output(tmp_path / "chunked")), served)
    assert not np.allclose(vectors(output(tmp_path / "chunked")), vectors(output(tmp_path / "text-matching")),
                           atol=1e-3)


def test_an_unknown_task_or_a_task_without_adapters_stops_the_job(task_bundle: Path, tiny_plain_bundle: Path,
                                                                  tmp_path: Path, capsys) -> None:
    inputs = write(tmp_path / "docs.jsonl", [{"id": "a", "text": "x"}])
    assert _embed(task_bundle, inputs, tmp_path / "one", "--task", "separation") == 2
    err = capsys.readouterr().err
    assert "--task: task 'separation' is not one of model " in err and "tasks (it has: 'retrieval.query'" in err
    assert _embed(tiny_plain_bundle, inputs, tmp_path / "two", "--task", "retrieval.query") == 2
    err = capsys.readouterr().err
    assert "has no tasks" in err and "leave --task out" in err
