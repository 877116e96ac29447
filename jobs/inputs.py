"""Reading a corpus as one stream of rows in chunks: JSONL, CSV, Parquet or plain text (one document a line).

A row has a number (`row`: 0-based, counted across the files in the order given), an id (the id column's
value as a string, or the row number when there is no id column) and a text (whatever the text column
holds: the job decides which rows are bad). Files are read in bounded chunks (Parquet by row groups and
batches, CSV by blocks, JSONL and text line by line), so memory does not grow with the corpus.

A value that cannot be read at all (a JSONL line that is not a JSON object, a text line that is not UTF-8)
is a `Bad` holding the reason, so one bad row is rejected instead of stopping the job.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet",
           ".pq": "parquet", ".txt": "text", ".text": "text"}
COUNT_BLOCK = 1 << 22  # bytes read at a time when counting lines


class InputError(Exception):
    """An input cannot be read as asked (unknown format, missing column, unreadable file); the job stops."""


@dataclass(frozen=True)
class Bad:
    reason: str


@dataclass(frozen=True)
class Columns:
    text: str = "text"
    id: str | None = None  # None: the row number is the id


@dataclass
class Chunk:
    start: int  # row number of the first row
    ids: list[Any]  # str (or None when missing) from an id column; the row number (int) otherwise
    texts: list[Any]  # the text column's values as read: str, None, another type, or Bad

    def __len__(self) -> int:
        return len(self.texts)


@dataclass(frozen=True)
class Source:
    path: Path
    format: str
    rows: int | None  # None for a pipe: not known until it has been read


def format_of(path: Path, forced: str | None) -> str:
    if forced:
        return forced
    found = FORMATS.get(path.suffix.lower())
    if found is None:
        known = ", ".join(sorted(set(FORMATS.values())))
        raise InputError(f"{path}: unknown format {path.suffix!r}; name it with --format ({known})")
    return found


def expand(paths: list[Path], forced: str | None) -> list[Path]:
    """A directory stands for its files of a known format (or all its files with --format), sorted by name."""
    files = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith((".", "_")))
            files += [p for p in found if forced or p.suffix.lower() in FORMATS]
        else:
            files.append(path)
    return files


def plan(paths: list[Path], forced: str | None, columns: Columns) -> list[Source]:
    """Every input with its format and row count (Parquet metadata, a cheap pass otherwise; None for a pipe)."""
    sources = []
    for path in expand(paths, forced):
        fmt = format_of(path, forced)
        if fmt == "text" and columns.id is not None:
            raise InputError(f"{path}: plain text has no columns; the row number is its id (drop --id-column)")
        sources.append(Source(path, fmt, count_rows(path, fmt, columns) if is_file(path) else None))
    return sources


def is_file(path: Path) -> bool:
    """A regular file (read twice: counted, then read); anything else (a pipe, /dev/stdin) is read once."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None


def count_rows(path: Path, fmt: str, columns: Columns) -> int:
    with _reading(path):
        if fmt == "parquet":
            return _parquet(path, columns).metadata.num_rows
        if fmt == "csv":
            return sum(batch.num_rows for batch in _csv(path, columns, 1 << 22))
        return _count_lines(path)


def read(sources: list[Source], columns: Columns, chunk_rows: int, skip: int = 0) -> Iterator[Chunk]:
    """Chunks of at most `chunk_rows` rows, in row order, from row number `skip` on."""
    first = 0  # row number of the current file's first row
    for source in sources:
        if source.rows is not None and first + source.rows <= skip:
            first += source.rows
            continue
        local_skip = max(0, skip - first)
        end = first + local_skip
        for chunk in read_source(source, columns, chunk_rows, local_skip, first):
            end = chunk.start + len(chunk)
            yield chunk
        if end < skip:
            raise InputError(f"{source.path}: ended after {end - first} rows, before row {skip} already written")
        first = end


def read_source(source: Source, columns: Columns, chunk_rows: int, skip: int, first_row: int) -> Iterator[Chunk]:
    """One file's rows from its row `skip` on, in chunks of at most `chunk_rows`; its first row is `first_row`."""
    start = first_row + skip
    with _reading(source.path):
        for ids, texts in _READERS[source.format](source.path, columns, chunk_rows, skip):
            if columns.id is None:
                ids = list(range(start, start + len(texts)))
            yield Chunk(start, ids, texts)
            start += len(texts)


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """A file that cannot be read or parsed at all stops the job with one line naming it."""
    try:
        yield
    except (OSError, pa.ArrowException) as error:
        reason = getattr(error, "strerror", None) or str(error).splitlines()[0] or type(error).__name__
        raise InputError(f"{path}: {reason}") from None


def _read_parquet(path: Path, columns: Columns, chunk_rows: int, skip: int) -> Iterator[tuple[list, list]]:
    file = _parquet(path, columns)
    groups, skipped = list(range(file.metadata.num_row_groups)), 0
    while groups and skipped + file.metadata.row_group(groups[0]).num_rows <= skip:  # not read at all
        skipped += file.metadata.row_group(groups.pop(0)).num_rows
    wanted = [c for c in (columns.id, columns.text) if c is not None]
    batches = file.iter_batches(batch_size=chunk_rows, row_groups=groups, columns=wanted) if groups else []
    yield from _sliced(((_ids(b, columns), b.column(columns.text).to_pylist()) for b in batches), skip - skipped)


def _read_csv(path: Path, columns: Columns, chunk_rows: int, skip: int) -> Iterator[tuple[list, list]]:
    batches = _csv(path, columns, 1 << 20)  # blocks of bytes: any number of rows
    chunks = _sliced(((_ids(b, columns), b.column(columns.text).to_pylist()) for b in batches), skip)
    for ids, texts in chunks:
        for start in range(0, len(texts), chunk_rows):
            yield ids[start:start + chunk_rows], texts[start:start + chunk_rows]


def _read_lines(path: Path, columns: Columns, chunk_rows: int, skip: int, parse) -> Iterator[tuple[list, list]]:
    ids: list[Any] = []
    texts: list[Any] = []
    with path.open("rb") as fh:
        for number, line in enumerate(fh):
            if number < skip:
                continue
            row_id, text = parse(line.rstrip(b"\r\n"), columns)
            ids.append(row_id)
            texts.append(text)
            if len(texts) == chunk_rows:
                yield ids, texts
                ids, texts = [], []
    if texts:
        yield ids, texts


def _text_line(line: bytes, columns: Columns) -> tuple[Any, Any]:
    try:
        return None, line.decode("utf-8")
    except UnicodeDecodeError:
        return None, Bad("not valid UTF-8")


def _json_line(line: bytes, columns: Columns) -> tuple[Any, Any]:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None, Bad("not valid JSON")
    if not isinstance(value, dict):
        return None, Bad("not a JSON object")
    row_id = value.get(columns.id) if columns.id is not None else None
    return _as_id(row_id), value.get(columns.text)


_READERS = {
    "parquet": _read_parquet,
    "csv": _read_csv,
    "jsonl": lambda path, columns, n, skip: _read_lines(path, columns, n, skip, _json_line),
    "text": lambda path, columns, n, skip: _read_lines(path, columns, n, skip, _text_line),
}


def _sliced(chunks: Iterator[tuple[list, list]], skip: int) -> Iterator[tuple[list, list]]:
    """Drop the first `skip` rows of a stream of (ids, texts) chunks."""
    for ids, texts in chunks:
        if skip >= len(texts):
            skip -= len(texts)
            continue
        yield ids[skip:], texts[skip:]
        skip = 0


def _ids(batch: Any, columns: Columns) -> list[Any]:
    return [_as_id(v) for v in batch.column(columns.id).to_pylist()] if columns.id is not None else []


def _as_id(value: Any) -> str | None:
    return None if value is None else str(value)


def _parquet(path: Path, columns: Columns) -> Any:
    file = pq.ParquetFile(path)
    names = file.schema_arrow.names
    for column in (columns.text, columns.id):
        if column is not None and column not in names:
            raise InputError(f"{path}: no column {column!r}; its columns are {', '.join(names)}")
    return file


def _csv(path: Path, columns: Columns, block_size: int) -> Any:
    """A streaming CSV reader of the id and text columns, both read as strings (no type guessing per block)."""
    wanted = [c for c in (columns.id, columns.text) if c is not None]
    convert = pcsv.ConvertOptions(include_columns=wanted, column_types={c: pa.string() for c in wanted})
    return pcsv.open_csv(path, read_options=pcsv.ReadOptions(block_size=block_size), convert_options=convert)


def _count_lines(path: Path) -> int:
    """Lines, counting a last line without a newline."""
    count, last = 0, b"\n"
    with path.open("rb") as fh:
        while block := fh.read(COUNT_BLOCK):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")
