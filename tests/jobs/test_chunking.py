"""--chunking through the local job on the tiny bundle (max length 64: windows of 62 content tokens): the
service's pooled vectors, windows and spans; short documents unchanged; the window cap's rejects; the CLI."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from jobs.inputs import Columns
from jobs.local import Job, run
from jobs.options import Chunking, JobOutput
from tests.helpers.serving import serving
from tests.jobs.corpus import job_model, long_texts, output, rejects, texts, vectors, write

SMALL_BATCHES = {"max_batch_size": 4}  # a document's windows (62 content tokens but its last) span batches


def _run(bundle: Path, inputs: list[Path], out: Path, settings: dict | None = None, **job: object):
    return run(Job(tuple(inputs), out, **job), job_model(bundle, **(settings or {})),  # type: ignore[arg-type]
               io.StringIO())


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())


def _scores(classified: list[list[dict]], labels: list[str]) -> np.ndarray:
    """Best-first {label, score} lists -> (N, C) scores in the manifest's label order."""
    return np.array([[next(s["score"] for s in c if s["label"] == label) for label in labels] for c in classified],
                    dtype=np.float32)


def _reference_windows(tokenizer: Tokenizer, text: str, overlap: int, size: int = 62) -> list[tuple[int, int, int]]:
    """(start, stop, content tokens) of each window, from the tokenizers library's offsets: windows of `size`
    tokens at 0, size - overlap, ..., the last the first to reach the end (issue #10's rule)."""
    offsets = tokenizer.encode(text, add_special_tokens=False).offsets
    spans, first = [], 0
    while True:
        last = min(first + size, len(offsets))
        spans.append((offsets[first][0], offsets[last - 1][1], last - first))
        if last == len(offsets):
            return spans
        first += size - overlap


@pytest.fixture
def mixed(tmp_path: Path) -> tuple[list[str], Path]:
    """10 documents of 3 to 7 windows between 14 short ones, with ids d00..d23."""
    long, short = long_texts(10), texts(14)
    docs = [long.pop() if i % 5 in (1, 3) and long else short.pop() for i in range(24)]
    return docs, write(tmp_path / "docs.jsonl", [{"id": f"d{i:02d}", "text": t} for i, t in enumerate(docs)])


async def test_pooled_documents_equal_the_services_chunking_mean(tiny_bundle: Path, tmp_path: Path, mixed) -> None:
    """Same windows, and the same batches (all the windows of one request, one part): the same bits."""
    docs, path = mixed
    _run(tiny_bundle, [path], tmp_path / "out", SMALL_BATCHES, columns=Columns("text", "id"),
         output=JobOutput(classify=True, token_count=True, chunking=Chunking("mean", 32, 512)))
    table = output(tmp_path / "out")
    async with serving(tiny_bundle, intra_op_threads=1, **SMALL_BATCHES) as (_, client):
        embedded = (await client.post("/embed", json={"inputs": docs, "chunking": "mean"})).json()
        classified = (await client.post("/classify", json={"inputs": docs, "chunking": "mean"})).json()
        usage = (await client.post("/v1/embeddings", json={"input": docs, "chunking": "mean"})).json()["usage"]
    served, ours = np.asarray(embedded, dtype=np.float32), vectors(table)  # (N, D)
    assert table.column("id").to_pylist() == [f"d{i:02d}" for i in range(24)]
    assert _cosine(served, ours) >= 0.99999
    assert np.array_equal(served, ours)
    assert table.column("label").to_pylist() == [c[0]["label"] for c in classified]
    labels = json.loads((tiny_bundle / "manifest.json").read_text())["labels"]
    np.testing.assert_allclose(vectors(table, "scores"), _scores(classified, labels), rtol=1e-6)
    assert sum(table.column("tokens").to_pylist()) == usage["total_tokens"]  # every window's, specials included


async def test_windows_equal_the_services_chunking_windows(tiny_bundle: Path, tmp_path: Path, mixed) -> None:
    docs, path = mixed
    summary = _run(tiny_bundle, [path], tmp_path / "out", SMALL_BATCHES, columns=Columns("text", "id"),
                   output=JobOutput(classify=True, chunking=Chunking("windows", 16, 512)))
    table = output(tmp_path / "out")
    request = {"inputs": docs, "chunking": "windows", "chunk_overlap": 16}
    async with serving(tiny_bundle, intra_op_threads=1, **SMALL_BATCHES) as (_, client):
        embedded = (await client.post("/embed", json=request)).json()
        classified = (await client.post("/classify", json=request)).json()
    served = [(f"d{i:02d}", k, w["start"], w["stop"], w["tokens"]) for i, ws in enumerate(embedded)
              for k, w in enumerate(ws)]
    assert list(zip(*(table.column(c).to_pylist() for c in ("id", "window", "start", "stop", "tokens")),
                    strict=True)) == served
    assert len(served) > 2 * len(docs)  # the long documents made several windows each
    served_vectors = np.array([w["embedding"] for ws in embedded for w in ws], dtype=np.float32)  # (M, D)
    assert _cosine(served_vectors, vectors(table)) >= 0.99999
    assert np.array_equal(served_vectors, vectors(table))
    flat = [w["scores"] for ws in classified for w in ws]
    assert table.column("label").to_pylist() == [s[0]["label"] for s in flat]
    labels = json.loads((tiny_bundle / "manifest.json").read_text())["labels"]
    np.testing.assert_allclose(vectors(table, "scores"), _scores(flat, labels), rtol=1e-6)
    assert (summary.rows, summary.written, summary.tokens) == (24, 24, sum(table.column("tokens").to_pylist()))


def test_short_documents_are_unchanged_by_chunking_mean(tiny_bundle: Path, tmp_path: Path) -> None:
    """Texts of at most 62 tokens make one window each: exactly today's rows, tokens column included."""
    path = write(tmp_path / "docs.parquet", [{"id": f"d{i}", "text": t} for i, t in enumerate(texts(40))])
    plain = JobOutput(classify=True, token_count=True)
    for name, options in (("plain", plain), ("mean", replace(plain, chunking=Chunking("mean", 32, 512)))):
        _run(tiny_bundle, [path], tmp_path / name, columns=Columns("text", "id"), part_rows=16, output=options)
    for index in range(3):
        part = f"part-{index:05d}.parquet"
        assert pq.read_table(tmp_path / "mean" / part).equals(pq.read_table(tmp_path / "plain" / part)), part


def test_windows_mode_writes_one_row_per_window_with_its_span(tiny_bundle: Path, tmp_path: Path) -> None:
    docs = [*long_texts(5), "  a warm film with spaces around  ", *long_texts(9)[5:]]
    path = write(tmp_path / "docs.jsonl", [{"text": t} for t in docs])
    summary = _run(tiny_bundle, [path], tmp_path / "out", part_rows=4,
                   output=JobOutput(chunking=Chunking("windows", 8, 512)))
    table = output(tmp_path / "out")
    tokenizer = Tokenizer.from_file(str(tiny_bundle / "tokenizer.json"))
    expected = [(row, k, *span) for row, text in enumerate(docs)
                for k, span in enumerate(_reference_windows(tokenizer, text, 8))]
    columns = ("id", "window", "start", "stop", "tokens")
    assert list(zip(*(table.column(c).to_pylist() for c in columns), strict=True)) == expected
    assert len(expected) > 3 * len(docs)
    spans = [(start, stop) for row, start, stop in zip(*(table.column(c).to_pylist() for c in ("id", "start", "stop")),
                                                         strict=True) if row == 5]
    assert [docs[5][start:stop] for start, stop in spans] == ["a warm film with spaces around"]
    assert (summary.rows, summary.written, summary.rejected, summary.parts) == (10, 10, 0, 3)
    assert summary.tokens == sum(e[4] for e in expected)


def test_a_document_over_the_window_cap_is_rejected_and_the_job_goes_on(tiny_bundle: Path, tmp_path: Path) -> None:
    docs = [texts(1)[0], *long_texts(3), "", "dull"]
    path = write(tmp_path / "docs.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(docs)])
    summary = _run(tiny_bundle, [path], tmp_path / "out", part_rows=3, columns=Columns("text", "id"),
                   output=JobOutput(chunking=Chunking("mean", 32, 3)))
    tokenizer = Tokenizer.from_file(str(tiny_bundle / "tokenizer.json"))
    windows = [len(_reference_windows(tokenizer, t, 32)) if t else 0 for t in docs]
    over = [i for i, count in enumerate(windows) if count > 3]
    assert over and len(over) < 3  # some long documents over the cap of 3 windows, some under
    tokens = [len(tokenizer.encode(docs[i], add_special_tokens=False).ids) for i in over]
    assert rejects(tmp_path / "out") == sorted(
        [{"row": 4, "id": "d4", "reason": "empty text"}] +
        [{"row": i, "id": f"d{i}", "reason": f"{n} tokens make {windows[i]} windows, over the limit of 3 windows "
          "per input (--max-windows-per-input)"} for i, n in zip(over, tokens, strict=True)], key=lambda r: r["row"])
    kept = [f"d{i}" for i in range(len(docs)) if i not in over and docs[i]]
    assert output(tmp_path / "out").column("id").to_pylist() == kept
    assert (summary.rows, summary.written, summary.rejected) == (6, len(kept), 1 + len(over))


def test_cli_chunking_flags_and_refusals(tiny_bundle: Path, tmp_path: Path, capsys) -> None:
    from jobs.cli import main

    path = write(tmp_path / "docs.jsonl", [{"text": t} for t in [*long_texts(2), "dull"]])
    base = [str(path), "--bundle", str(tiny_bundle), "--out", str(tmp_path / "out"), "--intra-op-threads", "1"]
    assert main([*base, "--chunking", "windows", "--chunk-overlap", "62"]) == 2
    assert "--chunk-overlap must be at least 0 and below the window of 62 tokens" in capsys.readouterr().err
    assert main([*base, "--chunk-overlap", "4"]) == 2
    assert "--chunk-overlap needs --chunking" in capsys.readouterr().err
    assert main([*base, "--chunking", "mean", "--chunk-overlap", "0", "--max-windows-per-input", "2"]) == 0
    assert capsys.readouterr().out.startswith("3 rows (2 written, 1 rejected) in 1 parts, ")
    assert main([*base, "--chunking", "windows", "--chunk-overlap", "0", "--max-windows-per-input", "2"]) == 2
    assert "different job (changed: output)" in capsys.readouterr().err


async def test_without_an_overlap_the_windows_are_the_services_default(tmp_path: Path) -> None:
    """No --chunk-overlap: the overlap /embed takes when a request names none, the model's own. A model of 24
    positions has windows of 22 content tokens, where the usual 32 does not fit: half the window, 11."""
    from export.bundle import export_bundle
    from tests.helpers.tiny import make_tiny_checkpoint

    bundle = tmp_path / "short"
    export_bundle(make_tiny_checkpoint(tmp_path / "ckpt", max_length=24), bundle, variants=("fp32",))
    docs = long_texts(3)
    path = write(tmp_path / "docs.jsonl", [{"text": t} for t in docs])
    _run(bundle, [path], tmp_path / "out", output=JobOutput(chunking=Chunking("windows", None, 512)))
    table = output(tmp_path / "out")
    async with serving(bundle, intra_op_threads=1) as (_, client):
        embedded = (await client.post("/embed", json={"inputs": docs, "chunking": "windows"})).json()
    served = [(w["start"], w["stop"], w["tokens"]) for ws in embedded for w in ws]
    assert list(zip(*(table.column(c).to_pylist() for c in ("start", "stop", "tokens")), strict=True)) == served
    assert embedded[0][0]["tokens"] == 22 and len(embedded[0]) > 2  # (the job refused 32 >= 22 before)
    assert np.array_equal(np.array([w["embedding"] for ws in embedded for w in ws], dtype=np.float32), vectors(table))
