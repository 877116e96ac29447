"""A two-tower checkpoint's export (CLIP's CLIPModel, SigLIP's SiglipModel): one bundle of the text tower, holding the
image tower's own bundle in a directory of it (bundle.manifest.PairSpec), so one served model embeds texts and images
into the one space and scores them against each other as the pair does.

Each tower is loaded from the one directory (model.load.load_model(path, tower=...)) and built, gated and measured as
any text or image model is; the pair's logit scale and bias, which both towers' configs carry (model/towers.py), go
into the manifest's `pair` section.
"""

from __future__ import annotations

import json
from pathlib import Path

from bundle.inputs import PairSpec
from export.refusals import ExportError
from model.config import EncoderConfig
from model.families.towers import PAIRS

IMAGE_TOWER = "image"  # the image tower's directory inside a pair's bundle
SCORING = {"clip": "softmax", "siglip": "sigmoid"}  # how transformers' CLIPModel and SiglipModel read the logits


def pair_type(source: Path) -> str | None:
    """The two-tower model_type (clip, siglip) of the checkpoint at `source`, or None for any other directory."""
    try:
        model_type = json.loads((source / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None  # load_model says what the directory is
    return model_type if model_type in PAIRS else None


def check_pair(chosen: list[str], adapters: list[str], reranker: str | None) -> None:
    """What a pair's export does not build, refused by name before any work: adapters, a reranker recipe, the int8
    variants (their calibration and gates are one tower's texts)."""
    if adapters or reranker is not None:
        raise ExportError("a two-tower checkpoint (CLIP, SigLIP) is exported without --adapter and --reranker")
    if quantised := [v for v in chosen if v.startswith("int8")]:
        raise ExportError(f"variant(s) {', '.join(quantised)} are not built for a two-tower model; export fp32, "
                          "fp32-opt or fp16")


def pair_spec(text: EncoderConfig) -> PairSpec:
    """The manifest's pair section from the text tower's config (both towers carry the pair's scale and bias)."""
    assert text.logit_scale is not None, "a pair's towers carry its logit_scale (model/towers.py)"
    return PairSpec(image_tower=IMAGE_TOWER, logit_scale=text.logit_scale, logit_bias=text.logit_bias,
                    scoring=SCORING[text.architecture])  # type: ignore[arg-type]
