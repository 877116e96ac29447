"""Texts the parity gate runs: fixed sentences of mixed lengths, and a few hundred for int8 agreement."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

_SHORT = ["ok", "Great!", "Not good.", "Why?", "a", "The plot thickens."]
_MEDIUM = [
    "A warm, funny and surprisingly moving film about growing up.",
    "The acting is wooden and the script never finds its footing.",
    "I expected more from the director of such a fine debut.",
    "An uneven but often delightful comedy with a great cast.",
    "Two hours of my life I will never get back, sadly.",
    "The soundtrack alone is worth the price of the ticket.",
    "Attention maps show which tokens each head looks at.",
    "Numbers like 3.14159 and dates like 2024-01-31 tokenise oddly.",
]
_LONG = [
    " ".join(["This long review rambles on about the cinematography, the pacing and the cast,"] * 6),
    " ".join(["Transformers encode text with stacked self-attention and feed-forward layers."] * 12),
    " ".join(["word"] * 600),  # longer than any max_length: exercises truncation
]
PARITY_TEXTS: tuple[str, ...] = tuple(_SHORT + _MEDIUM + _LONG)
# Batch sizes the parity texts are cut into, in order: mixed sizes, the rest in the last batch.
PARITY_BATCHES = (1, 3, 8, 5)


def parity_batches() -> list[list[str]]:
    """PARITY_TEXTS cut into batches of mixed sizes and mixed lengths (padding inside batches)."""
    texts, batches, start = list(PARITY_TEXTS), [], 0
    for size in PARITY_BATCHES:
        batches.append(texts[start:start + size])
        start += size
    if start < len(texts):
        batches.append(texts[start:])
    return [b for b in batches if b]


def evaluation_texts(count: int = 300) -> list[str]:
    """Texts for the int8 label-agreement check.

    The last `count` Rotten Tomatoes snippets in file order (the tail the default model's training
    split leaves mostly unseen) when the data wheel is installed; else the parity texts.
    """
    from model.assets import AssetMissing, rotten_tomatoes

    try:
        rows = rotten_tomatoes()
    except AssetMissing as err:
        log.warning("Rotten Tomatoes data unavailable (%s); int8 agreement uses the fixed parity texts", err)
        return list(PARITY_TEXTS)
    return [text for text, _ in rows[-count:]]
