"""Two-tower checkpoints (CLIP, SigLIP): one directory, an image encoder and a text encoder, loaded one tower at a time.

Shape letters: N images, M texts, E the shared space's width.

A CLIPModel or SiglipModel directory holds both towers' weights under one config.json (text_config, vision_config).
`load_model(path, tower="vision")` and `load_model(path, tower="text")` each give one LoadedModel, an Encoder like
any other, so the export can write an image graph and a text graph from the one directory; load_model(path) alone
refuses such a directory by name. A single-tower checkpoint (CLIPVisionModelWithProjection, SiglipTextModel, ...)
loads without `tower`, or with its own. `tower_config` turns the pair's config.json into its tower's, as transformers
builds the tower: the tower's own config over its config class's defaults (a pair's config.json keeps only what
differs from them), its model_type and class (CLIP's ...WithProjection: the pair has both projections), and
CLIPModel's projection_dim.

The pair's logit scale (CLIP, SigLIP) and bias (SigLIP) are parameters of the pair, not of either tower: the loader
reads them into both towers' configs (EncoderConfig.logit_scale, logit_bias), so whichever graph is served knows how
the pair scores. `pair_logits` scores as transformers' CLIPModel and SiglipModel do: both towers' embeddings
L2-normalised, their dot products times exp(logit_scale), plus logit_bias. CLIP's logits per image are read as a
softmax over the texts, SigLIP's each through a sigmoid.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from model.config import EncoderConfig
from model.families.towers import DEFAULTS, PAIRS

TOWER_NAMES = ("vision", "text")
SCALARS = ("logit_scale", "logit_bias")  # the pair's parameters the towers' configs carry


def tower_config(hf: dict[str, Any], tower: str | None) -> dict[str, Any]:
    """config.json of the tower `tower` of the checkpoint whose config.json is `hf` (a pair's or a tower's own);
    `hf` itself when `tower` is None. A ValueError for an unknown tower or one a single-tower checkpoint is not."""
    if tower is None:
        return hf
    if tower not in TOWER_NAMES:
        raise ValueError(f"tower {tower!r} is not one of {', '.join(TOWER_NAMES)}")
    model_type = hf.get("model_type")
    if model_type not in PAIRS:
        own = "vision" if str(model_type).endswith("vision_model") else "text" if str(model_type).endswith(
            "text_model") else None
        if own != tower:
            raise ValueError(f"tower {tower!r}: a {model_type!r} checkpoint holds no {tower} tower")
        return hf
    key, tower_type, tower_class = PAIRS[model_type][1][tower]
    config = {**DEFAULTS[tower_type], **(hf.get(key) or {}), "model_type": tower_type, "architectures": [tower_class]}
    if "projection_dim" in hf:
        config["projection_dim"] = hf["projection_dim"]  # CLIPModel's projections, whatever the tower's says
    return config


def pair_logits(image_embeds: Tensor, text_embeds: Tensor, config: EncoderConfig) -> Tensor:
    """logits_per_image (N, M) from the towers' embeddings (N, E) and (M, E), by the pair's scale and bias."""
    if config.logit_scale is None:
        raise ValueError("this encoder's config has no logit_scale: it was not loaded from a two-tower checkpoint")
    image = image_embeds / image_embeds.norm(p=2, dim=-1, keepdim=True)  # (N, E)
    text = text_embeds / text_embeds.norm(p=2, dim=-1, keepdim=True)  # (M, E)
    logits = text @ image.T * image.new_tensor(config.logit_scale).exp()  # (M, N): logits_per_text
    if config.logit_bias is not None:
        logits = logits + config.logit_bias
    return logits.T  # (N, M)
