"""Reading labelled data, splitting it and ordering its batches."""

from __future__ import annotations

import json
import random

import pytest

from model.training.data import DataError, batch_order, from_pairs, load_dataset, split


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_and_csv_read_the_same(tmp_path):
    rows = [{"text": "good film", "label": "pos"}, {"text": "bad, film", "label": "neg"}]
    jsonl = load_dataset(write_jsonl(tmp_path / "d.jsonl", rows))
    (tmp_path / "d.csv").write_text('text,label\ngood film,pos\n"bad, film",neg\n')
    csv = load_dataset(tmp_path / "d.csv")
    assert jsonl == csv
    assert jsonl.label_names == ("neg", "pos") and jsonl.labels == [1, 0]


def test_custom_columns(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"body": "a", "y": 1}, {"body": "b", "y": 0}])
    assert load_dataset(path, "body", "y").label_names == ("0", "1")


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        ('{"text": "a"}\n', "d.jsonl", "no column 'label'"),
        ("text,label\na,x\nb,x\n", "d.csv", "at least two labels"),
        ("not json\n", "d.jsonl", "not valid JSON"),
        ("a\tb\n", "d.parquet", "unknown data format"),
        ("", "d.jsonl", "no rows"),
    ],
)
def test_bad_input_names_the_problem(tmp_path, content, name, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(DataError, match=message):
        load_dataset(tmp_path / name)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_dataset(tmp_path / "nope.jsonl")


def test_split_is_stratified_disjoint_and_fixed():
    data = from_pairs([(f"t{i}", "a" if i % 4 else "b") for i in range(100)])
    train, val = split(data, 0.2, seed=0)
    assert len(val) == 20 and val.labels.count(0) == 15 and val.labels.count(1) == 5
    assert not set(train.texts) & set(val.texts)
    assert split(data, 0.2, seed=0)[1] == val
    assert split(data, 0.2, seed=1)[1] != val


@pytest.mark.parametrize("shuffle", [False, True])
def test_batch_order_covers_every_index_once(shuffle):
    lengths = [random.Random(i).randint(1, 50) for i in range(103)]
    batches = batch_order(lengths, 10, shuffle, random.Random(0))
    assert sorted(i for b in batches for i in b) == list(range(103))
    if not shuffle:
        flat = [lengths[i] for b in batches for i in b]
        assert flat == sorted(flat)
