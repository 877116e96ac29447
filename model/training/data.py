"""Labelled text data: read JSONL or CSV, map labels to ids, split off a held-out set, order batches.

Every problem with the input (missing file, unknown format, missing column, empty text, a single
label) raises DataError with a message that names the file and the fix; the CLI prints it.
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


class DataError(ValueError):
    pass


@dataclass(frozen=True)
class Dataset:
    texts: list[str]
    labels: list[int]  # indices into label_names
    label_names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, indices: Sequence[int]) -> Dataset:
        return Dataset([self.texts[i] for i in indices], [self.labels[i] for i in indices], self.label_names)


def read_rows(path: Path) -> list[dict[str, object]]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        return _read_jsonl(path)
    if suffix in (".csv", ".tsv"):
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh, delimiter="\t" if suffix == ".tsv" else ","))
    raise DataError(f"{path}: unknown data format {suffix!r}; use .jsonl or .csv")


def _read_jsonl(path: Path) -> list[dict[str, object]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}:{number}: not valid JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}:{number}: each line must be a JSON object")
        rows.append(row)
    return rows


def load_dataset(path: Path, text_column: str = "text", label_column: str = "label") -> Dataset:
    rows = read_rows(path)
    if not rows:
        raise DataError(f"{path}: no rows")
    for column in (text_column, label_column):
        missing = next((i for i, row in enumerate(rows, start=1) if column not in row), None)
        if missing is not None:
            found = ", ".join(sorted(rows[missing - 1])) or "none"
            raise DataError(f"{path}: row {missing} has no column {column!r} (columns found: {found})")
    pairs = [(str(row[text_column]), str(row[label_column])) for row in rows]
    return from_pairs(pairs, source=str(path))


def from_pairs(pairs: Sequence[tuple[str, str]], source: str = "data") -> Dataset:
    """(text, label name) pairs -> Dataset with labels sorted by name; needs two labels or more."""
    empty = next((i for i, (text, _) in enumerate(pairs, start=1) if not text.strip()), None)
    if empty is not None:
        raise DataError(f"{source}: row {empty} has an empty text")
    names = tuple(sorted({label for _, label in pairs}))
    if len(names) < 2:
        raise DataError(f"{source}: found only the label {names!r}; classification needs at least two labels")
    index = {name: i for i, name in enumerate(names)}
    return Dataset([t for t, _ in pairs], [index[label] for _, label in pairs], names)


def split(data: Dataset, val_fraction: float, seed: int) -> tuple[Dataset, Dataset]:
    """Stratified (train, held-out) split: each label keeps its share in both parts."""
    if not 0.0 < val_fraction < 1.0:
        raise DataError(f"val fraction must be between 0 and 1, got {val_fraction}")
    rng = random.Random(seed)
    train, val = [], []
    for label in range(len(data.label_names)):
        members = [i for i, y in enumerate(data.labels) if y == label]
        rng.shuffle(members)
        cut = round(len(members) * val_fraction)
        val += members[:cut]
        train += members[cut:]
    if not train or not val:
        raise DataError(f"{len(data)} examples are too few to split with val fraction {val_fraction}")
    return data.subset(sorted(train)), data.subset(sorted(val))


def batch_order(lengths: Sequence[int], batch_size: int, shuffle: bool, rng: random.Random) -> list[list[int]]:
    """Index batches. Evaluation: sorted by length to cut padding. Training: shuffled, then sorted
    within windows of 50 batches, so batches still hold similar lengths but differ each epoch."""
    order = list(range(len(lengths)))
    if not shuffle:
        order.sort(key=lambda i: lengths[i])
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(order)
    window = batch_size * 50
    for start in range(0, len(order), window):
        order[start : start + window] = sorted(order[start : start + window], key=lambda i: lengths[i])
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches
