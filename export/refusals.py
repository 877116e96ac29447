"""What an export refuses before it builds anything, each by name (ExportError): unknown variants, a target that is not
a bundle, what adapters or an image model cannot be built with, int8 calibration data without int8; and the int8
variants' calibration texts, read first."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from bundle.manifest import MANIFEST_NAME
from bundle.variants import chosen_variants
from export.calibration import TextSets, text_sets
from model.families import family_of

log = logging.getLogger(__name__)


class ExportError(RuntimeError):
    """The export was asked for something it cannot do (unknown variant, unsafe output path)."""


def normalise_variants(variants: Sequence[str]) -> list[str]:
    """fp32 always, then the others asked for, in canonical order (bundle.variants); unknown names are an error."""
    try:
        return chosen_variants(variants)
    except ValueError as err:
        raise ExportError(str(err)) from None


def int8_texts(source: Path, chosen: list[str], calibration_data: Path | None) -> TextSets | None:
    """The int8 variants' calibration and gate texts, read before any work; calibration data without int8
    is an error, not ignored."""
    if not any(v.startswith("int8") for v in chosen):
        if calibration_data is not None:
            raise ExportError("--calibration-data is read only by the int8 variants; add int8 (or int8-dynamic) "
                              "to --variants, or leave it out")
        return None
    texts = text_sets(source, calibration_data)
    log.info("int8: %d calibration texts, %d held-out and %d short gate texts, from %s",
             len(texts.calibration), len(texts.held_out), len(texts.short), texts.source)
    return texts


def check_adapters(adapters: list[str], chosen: list[str], reranker: str | None) -> None:
    """What the export does not build with adapters (by name), refused before any graph is built: a reranker, and
    the variants whose gates could not cover them (model.load.load_model reads the adapters themselves)."""
    if not adapters:
        return
    if reranker is not None:
        raise ExportError("--adapter and --reranker do not go together (a reranker's scoring is not adapted)")
    if quantised := [v for v in chosen if v.startswith("int8")]:
        raise ExportError(f"variant(s) {', '.join(quantised)} are not built with adapters: their calibration and "
                          "gates cover the base only; export fp32, fp32-opt or fp16")


def check_image(source: Path, chosen: list[str]) -> None:
    """What an image model's export does not build yet, refused by name before any work: the int8 variants (their
    calibration and gates are texts). An image model is one whose config.json names a vision family."""
    try:
        family, _ = family_of(json.loads((source / "config.json").read_text()))
    except (OSError, ValueError):  # no config.json, or no family: not an image model (load_model says what it is)
        return
    if family.modality != "text" and (quantised := [v for v in chosen if v.startswith("int8")]):
        raise ExportError(f"variant(s) {', '.join(quantised)} are not built for an image model (their calibration is "
                          "texts); export fp32, fp32-opt or fp16")


def check_target(out_dir: Path) -> None:
    if out_dir.exists() and not (out_dir / MANIFEST_NAME).is_file() and any(out_dir.iterdir()):
        raise ExportError(f"{out_dir} exists and is not a bundle; refusing to replace it")
