"""The local job end to end on the tiny bundle: the service's vectors, rejects, resume, refusals."""

from __future__ import annotations

import io
import json
import shutil
import signal
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from inference.options import LoadOptions
from inference.runtime.loading import load_bundle
from jobs.inputs import Chunk, Columns
from jobs.local import Job, in_parts, run
from jobs.options import JobError, JobOutput
from jobs.tables import FINGERPRINT_KEY
from tests.helpers.serving import serving
from tests.jobs.corpus import job_model, output, rejects, texts, vectors, write


def _run(bundle: Path, inputs: list[Path], out: Path, **job: object):
    return run(Job(tuple(inputs), out, **job), job_model(bundle), io.StringIO())  # type: ignore[arg-type]


async def test_vectors_labels_and_scores_equal_the_services(tiny_bundle: Path, tmp_path: Path) -> None:
    """Same bundle, variant (fp32), tokenizer and batches (one request of 90 texts, a part of 90 rows): the
    same bits, not just close."""
    docs = texts(90)
    path = write(tmp_path / "docs.jsonl", [{"id": f"d{i:03d}", "text": t} for i, t in enumerate(docs)])
    _run(tiny_bundle, [path], tmp_path / "out", columns=Columns("text", "id"), output=JobOutput(classify=True))
    table = output(tmp_path / "out")
    async with serving(tiny_bundle, intra_op_threads=1, cache_bytes=0) as (_, client):
        answer = await client.post("/embed", json={"inputs": docs})
        embedded, fingerprint = answer.json(), answer.headers["x-model-fingerprint"]
        classified = (await client.post("/classify", json={"inputs": docs})).json()
    served, ours = np.asarray(embedded, dtype=np.float32), vectors(table)  # (N, D)
    for part in (tmp_path / "out").glob("part-*.parquet"):  # which model build made the vectors, as served
        assert pq.read_schema(part).metadata[FINGERPRINT_KEY].decode() == fingerprint
    assert table.column("id").to_pylist() == [f"d{i:03d}" for i in range(90)]
    cosine = (served * ours).sum(axis=1) / np.linalg.norm(served, axis=1) / np.linalg.norm(ours, axis=1)
    assert cosine.min() >= 0.99999
    assert np.array_equal(served, ours)
    assert table.column("label").to_pylist() == [c[0]["label"] for c in classified]
    labels = json.loads((tiny_bundle / "manifest.json").read_text())["labels"]
    served_scores = np.array([[next(s["score"] for s in c if s["label"] == label) for label in labels]
                              for c in classified], dtype=np.float32)
    np.testing.assert_allclose(vectors(table, "scores"), served_scores, rtol=1e-6)


def test_bad_rows_are_rejected_with_their_reason_and_the_rest_is_written(tiny_bundle: Path, tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text('{"id": "a", "text": "a warm film"}\n{"id": "b", "text": ""}\n{"id": "c", "text": 7}\n'
                    '{"id": "d"}\nnot json\n{"text": "no id"}\n{"id": "g", "text": "   "}\n'
                    '{"id": "h", "text": "dull"}\n')
    summary = _run(tiny_bundle, [path], tmp_path / "out", columns=Columns("text", "id"), part_rows=3,
                   output=JobOutput(token_count=True))
    assert output(tmp_path / "out").column("id").to_pylist() == ["a", "h"]
    assert [(r["row"], r["id"], r["reason"]) for r in rejects(tmp_path / "out")] == [
        (1, "b", "empty text"), (2, "c", "text is not a string (int)"), (3, "d", "missing text"),
        (4, None, "not valid JSON"), (5, None, "missing id"), (6, "g", "empty text")]
    tokens = output(tmp_path / "out").column("tokens").to_pylist()
    assert (summary.rows, summary.written, summary.rejected, summary.parts, summary.tokens) == (8, 2, 6, 3, sum(tokens))


def test_without_an_id_column_the_row_number_is_the_id(tiny_bundle: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("a warm film\n\nthe plot makes no sense\n")
    second.write_text("dull\n")
    _run(tiny_bundle, [first, second], tmp_path / "out", part_rows=2)
    table = output(tmp_path / "out")
    assert table.column("id").to_pylist() == [0, 2, 3] and str(table.schema.field("id").type) == "int64"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "_job.json", "_rejects", "part-00000.parquet", "part-00001.parquet"]


def test_a_rerun_after_a_kill_resumes_from_the_recorded_parts(tiny_bundle: Path, tmp_path: Path) -> None:
    """The state a kill leaves (two parts recorded, a third written but not recorded, a temporary file):
    the re-run redoes only the rest, and the output equals an uninterrupted run's, part for part."""
    rows = [{"id": f"d{i}", "text": t if i % 9 else ""} for i, t in enumerate(texts(60))]
    path = write(tmp_path / "docs.parquet", rows, row_group=7)
    job = {"columns": Columns("text", "id"), "part_rows": 16}
    _run(tiny_bundle, [path], tmp_path / "whole", **job)
    _run(tiny_bundle, [path], tmp_path / "killed", **job)
    state = json.loads((tmp_path / "killed" / "_job.json").read_text())
    (tmp_path / "killed" / "_job.json").write_text(json.dumps({**state, "parts": state["parts"][:2], "done": False}))
    (tmp_path / "killed" / "part-00003.parquet").unlink()
    (tmp_path / "killed" / ".part-abc.tmp").write_bytes(b"half a part")
    summary = _run(tiny_bundle, [path], tmp_path / "killed", **job)
    assert summary.rows == 60 and summary.parts == 4
    for name in ("part-00000.parquet", "part-00001.parquet", "part-00002.parquet", "part-00003.parquet"):
        assert pq.read_table(tmp_path / "killed" / name).equals(pq.read_table(tmp_path / "whole" / name)), name
    assert rejects(tmp_path / "killed") == rejects(tmp_path / "whole")
    assert not [p for p in (tmp_path / "killed").iterdir() if p.name.startswith(".")]


def test_a_different_job_in_out_is_refused_and_overwrite_starts_afresh(tiny_bundle: Path, tmp_path: Path) -> None:
    path = write(tmp_path / "docs.jsonl", [{"id": str(i), "text": t} for i, t in enumerate(texts(10))])
    _run(tiny_bundle, [path], tmp_path / "out", columns=Columns("text", "id"))
    with pytest.raises(JobError, match=r"different job \(changed: part_rows\)"):
        _run(tiny_bundle, [path], tmp_path / "out", columns=Columns("text", "id"), part_rows=4)
    summary = _run(tiny_bundle, [path], tmp_path / "out", columns=Columns("text", "id"), part_rows=4, overwrite=True)
    assert summary.parts == 3 and len(list((tmp_path / "out").glob("part-*.parquet"))) == 3
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(JobError, match="already holds files"):
        _run(tiny_bundle, [path], tmp_path / "other", columns=Columns("text", "id"))
    shutil.rmtree(tmp_path / "out")


def test_cli_prints_the_summary_and_refuses_bad_settings(tiny_bundle: Path, tmp_path: Path, capsys) -> None:
    from jobs.cli import main

    path = tmp_path / "docs.txt"
    path.write_text("a warm film\ndull\n")
    assert main([str(path), "--bundle", str(tiny_bundle), "--out", str(tmp_path / "out"), "--token-count"]) == 0
    assert capsys.readouterr().out.startswith("2 rows (2 written, 0 rejected) in 1 parts, ")
    assert main([str(path), "--bundle", str(tiny_bundle), "--out", str(tmp_path / "o"), "--max-batch-size", "0"]) == 2
    assert "--max-batch-size (ATTNSERVE_MAX_BATCH_SIZE)" in capsys.readouterr().err
    assert main([str(path), "--bundle", str(tiny_bundle), "--out", str(tmp_path / "o"), "--variant", "int8"]) == 2
    assert "variant 'int8'" in capsys.readouterr().err


def test_cli_puts_the_callers_sigterm_handler_back(tiny_bundle: Path, tmp_path: Path, capsys) -> None:
    """main stops on SIGTERM only while its job runs: a test run (or any caller) keeps its own handler after,
    so a later SIGTERM does not raise jobs.cli.Stopped inside whatever runs then."""
    from jobs.cli import main

    path = tmp_path / "docs.txt"
    path.write_text("a warm film\ndull\n")
    before = signal.getsignal(signal.SIGTERM)
    assert main([str(path), "--bundle", str(tiny_bundle), "--out", str(tmp_path / "out")]) == 0
    assert signal.getsignal(signal.SIGTERM) is before
    assert main([str(tmp_path / "missing.txt"), "--bundle", str(tiny_bundle), "--out", str(tmp_path / "o")]) == 2
    assert signal.getsignal(signal.SIGTERM) is before
    capsys.readouterr()


def test_in_parts_cuts_the_row_stream_at_multiples_of_the_part_size() -> None:
    chunks = [Chunk(0, [0, 1, 2], ["a", "b", "c"]), Chunk(3, [3], ["d"]), Chunk(4, [4, 5, 6, 7, 8], list("efghi"))]
    parts = list(in_parts(iter(chunks), 4))
    assert [(p.start, p.ids) for p in parts] == [(0, [0, 1, 2, 3]), (4, [4, 5, 6, 7]), (8, [8])]


def test_the_jobs_token_ids_are_the_services(tiny_bundle: Path) -> None:
    """TextTokenizer.encode_ids (ids only, for the job) cuts exactly as encode(truncate=True) (the service)."""
    tokenizer = load_bundle(tiny_bundle, LoadOptions(intra_op_threads=1)).tokenizer
    docs = texts(40) + [" ".join(texts(40))]  # the last one is over the tiny model's 64 tokens
    ids = tokenizer.encode_ids(docs)
    assert max(len(i) for i in ids) == tokenizer.max_length
    assert all(np.array_equal(a, e.ids) for a, e in zip(ids, tokenizer.encode(docs, truncate=True), strict=True))


async def test_sparse_vectors_equal_embed_sparse(head_bundles, tmp_path: Path) -> None:
    """--sparse on a masked-LM bundle: a column of (index, value) lists, the server's /embed_sparse row for
    row; refused on a bundle of another task and with --chunking."""
    bundle = head_bundles["bert-mlm"].bundle
    docs = texts(12)
    path = write(tmp_path / "docs.jsonl", [{"text": t} for t in docs])
    _run(bundle, [path], tmp_path / "out", output=JobOutput(sparse=True))
    written = output(tmp_path / "out").column("sparse").to_pylist()
    async with serving(bundle, intra_op_threads=1) as (_, client):
        served = (await client.post("/embed_sparse", json={"inputs": docs})).json()
    assert [[e["index"] for e in row] for row in written] == [[e["index"] for e in row] for row in served]
    assert max(abs(a["value"] - b["value"]) for x, y in zip(written, served, strict=True)
               for a, b in zip(x, y, strict=True)) <= 1e-6
    with pytest.raises(JobError, match="masked-LM"):
        _run(head_bundles["bert-ce"].bundle, [path], tmp_path / "refused", output=JobOutput(sparse=True))
