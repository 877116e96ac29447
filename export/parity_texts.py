"""The texts every exported graph is gated on (export.parity): fixed sentences of mixed lengths, one longer than any
max_length (truncation), cut into batches of mixed sizes (padding inside batches); and query-passage pairs for a
cross-encoder."""

from __future__ import annotations

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


PARITY_PAIRS: tuple[tuple[str, str], ...] = tuple(
    (query, passage) for query, passage in zip(_SHORT + _MEDIUM[:4], _MEDIUM[4:] + _LONG + _SHORT[:3], strict=True))


def pair_batches() -> list[list[tuple[str, str]]]:
    """(query, passage) pairs for a cross-encoder's parity: short and long, one cut by truncation."""
    pairs = list(PARITY_PAIRS)
    return [pairs[:1], pairs[1:6], pairs[6:]]


def parity_batches() -> list[list[str]]:
    """PARITY_TEXTS cut into batches of mixed sizes and mixed lengths (padding inside batches)."""
    texts, batches, start = list(PARITY_TEXTS), [], 0
    for size in PARITY_BATCHES:
        batches.append(texts[start:start + size])
        start += size
    if start < len(texts):
        batches.append(texts[start:])
    return [b for b in batches if b]
