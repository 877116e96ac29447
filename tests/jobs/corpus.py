"""Small corpora for the job tests, the same rows in every format, and readers of a job's output."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from inference.options import LoadOptions
from jobs.batched import Batching
from jobs.local import JobModel
from tests.helpers.tiny import SENTENCES


def job_model(bundle: Path, max_batch_size: int = 64) -> JobModel:
    """The bundle as a job opens it on one intra-op thread, batched as the server's defaults batch."""
    return JobModel(bundle, LoadOptions(intra_op_threads=1), Batching(16_384, max_batch_size, 2048))


def texts(n: int) -> list[str]:
    """n texts of varied lengths from the tiny model's sentences (deterministic)."""
    return [" ".join(SENTENCES[(i * 7 + k) % len(SENTENCES)] for k in range(1 + i % 4)) for i in range(n)]


def long_texts(n: int, sentences: int = 12) -> list[str]:
    """n texts of about `sentences` to 2 x `sentences` tiny sentences each: several windows of the tiny model's 62
    content tokens (deterministic)."""
    return [" ".join(SENTENCES[(i * 11 + k * 3) % len(SENTENCES)] for k in range(sentences + (i * 13) % sentences))
            for i in range(n)]


def write(path: Path, rows: list[dict[str, Any]], row_group: int = 7) -> Path:
    """`rows` ({id, text}) as JSONL, CSV or Parquet (small row groups), by the file's extension."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".csv":
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=["id", "text"])
            writer.writeheader()
            writer.writerows(rows)
    else:
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group)
    return path


def output(out: Path) -> pa.Table:
    """A job's output directory read as one table (the part files, nothing else), sorted by id (and window)."""
    table = ds.dataset(out, format="parquet").to_table()
    return table.sort_by([(name, "ascending") for name in ("id", "window") if name in table.column_names])


def vectors(table: pa.Table, column: str = "embedding") -> np.ndarray:
    return np.stack(table.column(column).to_numpy(zero_copy_only=False))  # (N, D)


def rejects(out: Path) -> list[dict[str, Any]]:
    lines = [line for f in sorted((out / "_rejects").glob("*.jsonl")) for line in f.read_text().splitlines()]
    return sorted((json.loads(line) for line in lines), key=lambda r: r["row"])
