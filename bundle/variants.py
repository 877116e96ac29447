"""The graph variants a bundle may hold, by name and in their canonical order, and the set an export builds unless
told otherwise: torch-free, so the command line that names a bundle's variants before any export (`attnserve serve
--model`, `attnserve pull`) spells and orders them as the export does.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable

from bundle.manifest import Variant

VARIANTS: tuple[str, ...] = typing.get_args(Variant)  # fp32, fp32-opt, int8, int8-dynamic, fp16
# What `attnserve export` builds unless told otherwise: the exact variants (gated on float32 rounding against a
# float64 run of the model, export.gates). int8 and fp16 change the numbers (cosine gates), so they are built only
# when asked for.
DEFAULT_VARIANTS = ("fp32", "fp32-opt")


def chosen_variants(asked: Iterable[str]) -> list[str]:
    """fp32 always, then the others asked for, in canonical order; ValueError naming unknown ones."""
    asked = set(asked)
    if unknown := sorted(asked - set(VARIANTS)):
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    return [v for v in VARIANTS if v == "fp32" or v in asked]
