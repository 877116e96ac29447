"""Reading a corpus: the same rows from every format, row numbers across files, bad values kept as rows,
and reading from row k equal to reading everything and dropping k rows (what resume relies on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import inputs
from jobs.inputs import Bad, Columns, InputError
from tests.jobs.corpus import texts, write

ROWS = [{"id": f"doc-{i}", "text": t} for i, t in enumerate(texts(23))]


def _all(sources: list[inputs.Source], columns: Columns, chunk_rows: int = 5, skip: int = 0) -> tuple[list, list]:
    ids, values = [], []
    for chunk in inputs.read(sources, columns, chunk_rows, skip):
        assert len(chunk) <= chunk_rows and chunk.start == skip + len(values)
        ids += chunk.ids
        values += chunk.texts
    return ids, values


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_every_format_reads_the_same_rows_and_counts_them(tmp_path: Path, suffix: str) -> None:
    path = write(tmp_path / f"docs{suffix}", ROWS)
    columns = Columns("text", "id")
    sources = inputs.plan([path], None, columns)
    assert sources[0].rows == len(ROWS)
    assert _all(sources, columns) == ([r["id"] for r in ROWS], [r["text"] for r in ROWS])


def test_plain_text_is_one_document_a_line_numbered_across_files(tmp_path: Path) -> None:
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("one\ntwo\r\n\nthree")  # no newline at the end; an empty line is a row
    second.write_bytes(b"four\n\xff\xfe\n")
    sources = inputs.plan([first, second], None, Columns())
    assert [s.rows for s in sources] == [4, 2]
    ids, values = _all(sources, Columns())
    assert ids == list(range(6))
    assert values == ["one", "two", "", "three", "four", Bad("not valid UTF-8")]


def test_a_bad_jsonl_line_is_a_row_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text('{"id": 1, "text": "fine"}\nnot json\n[1, 2]\n{"id": 4}\n{"text": 5}\n')
    ids, values = _all(inputs.plan([path], None, Columns("text", "id")), Columns("text", "id"))
    assert ids == ["1", None, None, "4", None]
    assert values == ["fine", Bad("not valid JSON"), Bad("not a JSON object"), None, 5]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet", ".txt"])
@pytest.mark.parametrize("skip", [0, 1, 6, 7, 15, 23, 30])
def test_reading_from_row_k_drops_exactly_k_rows(tmp_path: Path, suffix: str, skip: int) -> None:
    """Across two files and Parquet row groups of 7: what a resumed job reads."""
    if suffix == ".txt":
        paths = [tmp_path / "a.txt", tmp_path / "b.txt"]
        paths[0].write_text("".join(r["text"] + "\n" for r in ROWS[:10]))
        paths[1].write_text("".join(r["text"] + "\n" for r in ROWS[10:]))
        columns = Columns()
    else:
        paths = [write(tmp_path / f"a{suffix}", ROWS[:10]), write(tmp_path / f"b{suffix}", ROWS[10:])]
        columns = Columns("text", "id")
    sources = inputs.plan(paths, None, columns)
    ids, values = _all(sources, columns)
    assert _all(sources, columns, skip=skip) == (ids[skip:], values[skip:])


def test_inputs_that_cannot_be_read_stop_the_job_naming_the_file(tmp_path: Path) -> None:
    docs = write(tmp_path / "docs.parquet", ROWS)
    with pytest.raises(InputError, match="no column 'body'"):
        inputs.plan([docs], None, Columns("body"))
    with pytest.raises(InputError, match=r"unknown format '\.xml'"):
        inputs.plan([tmp_path / "docs.xml"], None, Columns())
    with pytest.raises(InputError, match="missing.txt"):
        inputs.plan([tmp_path / "missing.txt"], None, Columns())
    (tmp_path / "a.txt").write_text("x\n")
    with pytest.raises(InputError, match="plain text has no columns"):
        inputs.plan([tmp_path / "a.txt"], None, Columns("text", "id"))
    csv = write(tmp_path / "docs.csv", ROWS)
    with pytest.raises(InputError, match="docs.csv"):
        inputs.plan([csv], None, Columns("body"))


def test_csv_ids_and_texts_are_read_as_strings(tmp_path: Path) -> None:
    """Arrow would guess ints per block; the job wants one type for the whole file."""
    path = tmp_path / "docs.csv"
    path.write_text("id,text\n1,123\n2,\n")
    ids, values = _all(inputs.plan([path], None, Columns("text", "id")), Columns("text", "id"))
    assert ids == ["1", "2"] and values == ["123", ""]


def test_a_directory_stands_for_its_known_files_in_name_order(tmp_path: Path) -> None:
    for name in ("b.txt", "a.txt", "notes.md", "_hidden.txt"):
        (tmp_path / name).write_text("x\n")
    assert [s.path.name for s in inputs.plan([tmp_path], None, Columns())] == ["a.txt", "b.txt"]
