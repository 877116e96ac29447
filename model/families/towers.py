"""The two-tower families: CLIP and SigLIP, each an image tower and a text tower, every tower the one encoder (its
config.json reading and its weight-name table here; model/towers.py says how a two-tower checkpoint loads).

    family        model_type            classes
    clip-vision   clip_vision_model     CLIPVisionModel, CLIPVisionModelWithProjection (and CLIPModel's image tower)
    clip-text     clip_text_model       CLIPTextModel, CLIPTextModelWithProjection (and CLIPModel's text tower)
    siglip-vision siglip_vision_model   SiglipVisionModel (and SiglipModel's image tower; SigLIP2's fixed-resolution
                                        checkpoints are SiglipModel)
    siglip-text   siglip_text_model     SiglipTextModel (and SiglipModel's text tower)

Every tower is pre-norm LayerNorm blocks (q, k, v and out with biases, fc1 -> activation -> fc2). They differ on:

    CLIP image    a patch Conv2d without bias, the class token, the grid's positions; a LayerNorm over the tokens
                  before the blocks (pre_layrnorm); quick GELU; the class token's final state through
                  post_layernorm (the pooled vector's own norm: last_hidden_state is not normalised) and, with
                  projection, visual_projection (no bias): image_embeds
    CLIP text     learned positions, the causal mask (with the padding's), quick GELU, a final norm over the tokens;
                  pooled at the end-of-text token: the first position of eos_token_id, or, where config.json says
                  eos_token_id 2 (the released openai checkpoints), the first position of the row's largest id, as
                  transformers keeps for them; text_projection (no bias): text_embeds
    SigLIP image  a patch Conv2d with bias and no class token, the grid's positions alone; tanh GELU; a final norm
                  over the tokens (post_layernorm); pooled by the attention probe (model/probe.py: its
                  nn.MultiheadAttention's fused in_proj split into q, k, v), with vision_use_head false by the
                  patches' mean (SiglipForImageClassification's pooling; transformers then gives no pooled output)
    SigLIP text   learned positions and no causal mask; trained on texts padded to max_length with no attention
                  mask (pad_to_max_length), pooled at the last position, padding or not; its `head` linear (with
                  bias) is the projection
Positions are resampled at another image size as transformers' interpolate_pos_encoding=True does (without it,
transformers refuses any size but image_size); at image_size the resampling is the identity, as its default is.
The pair's logit_scale (both) and logit_bias (SigLIP) are tensors in the checkpoint: the loader moves them into
both towers' configs.
"""

from __future__ import annotations

from typing import Any

from model.families.base import Family, Table, activation, layers
from model.families.vision import _side

_BLOCK: Table = layers("encoder.layers.{i}.", {
    "self_attn.q_proj": "attention.q_proj", "self_attn.k_proj": "attention.k_proj",
    "self_attn.v_proj": "attention.v_proj", "self_attn.out_proj": "attention.out_proj",
    "layer_norm1": "attn_norm", "layer_norm2": "ffn_norm", "mlp.fc1": "ffn.up", "mlp.fc2": "ffn.down",
})
_PAIR: Table = {"logit_scale": "logit_scale", "logit_bias": "logit_bias"}  # model/hf.py moves them into the config
_FLAT = ("embeddings.class_token", "embeddings.positions")


def _blocks(hf: dict[str, Any], architecture: str) -> dict[str, Any]:
    """The fields every tower names alike."""
    return dict(
        architecture=architecture, d_model=hf["hidden_size"], num_heads=hf["num_attention_heads"],
        num_layers=hf["num_hidden_layers"], d_ff=hf["intermediate_size"], norm_position="pre",
        layer_norm_eps=hf.get("layer_norm_eps", 1e-5 if architecture == "clip" else 1e-6), attention_bias=True,
        activation=activation(hf.get("hidden_act", "quick_gelu" if architecture == "clip" else "gelu_pytorch_tanh")),
        dropout=0.0, attention_dropout=hf.get("attention_dropout", 0.0), head_dropout=0.0,
    )


def _image(hf: dict[str, Any], architecture: str) -> dict[str, Any]:
    image_size, patch_size = _side(hf, "image_size"), _side(hf, "patch_size")
    clip = architecture == "clip"
    return {**_blocks(hf, architecture), "modality": "vision", "vocab_size": 0, "type_vocab_size": 0,
            "image_size": image_size, "patch_size": patch_size, "num_channels": hf.get("num_channels", 3),
            "max_length": int(clip) + (image_size // patch_size) ** 2, "position_embedding": "grid",
            "class_token": clip, "patch_bias": not clip, "embedding_norm": clip, "pooled_norm": clip}


def _text(hf: dict[str, Any], architecture: str) -> dict[str, Any]:
    return {**_blocks(hf, architecture), "vocab_size": hf["vocab_size"], "type_vocab_size": 0,
            "max_length": hf["max_position_embeddings"], "pad_token_id": hf.get("pad_token_id", 1),
            "position_embedding": "absolute", "embedding_norm": False}


def _clip_image(hf: dict[str, Any]) -> dict[str, Any]:
    return {**_image(hf, "clip"), "pooling": "cls"}


def _clip_text(hf: dict[str, Any]) -> dict[str, Any]:
    eos = int(hf.get("eos_token_id", 49407))
    return {**_text(hf, "clip"), "mask_kind": "causal", "pooling": "max_id" if eos == 2 else "end_token",
            "eos_token_id": eos}


def _clip_projection(hf: dict[str, Any], kind: str) -> dict[str, Any]:
    """...WithProjection (and CLIPModel's towers): a bias-free linear into the shared space of projection_dim."""
    if kind != "projection":
        return {}
    return dict(projection_size=hf.get("projection_dim", 512), projection_activation="identity",
                projection_bias=False)


def _siglip_image(hf: dict[str, Any]) -> dict[str, Any]:
    return {**_image(hf, "siglip"), "pooling": "probe" if hf.get("vision_use_head", True) else "mean"}


def _siglip_text(hf: dict[str, Any]) -> dict[str, Any]:
    return {**_text(hf, "siglip"), "pooling": "last_position", "pad_to_max_length": True,
            "projection_size": hf.get("projection_size") or hf["hidden_size"], "projection_activation": "identity"}


CLIP_VISION = Family(
    "clip-vision", ("clip_vision_model",), ("CLIPVision",), "vision_model.", _clip_image,
    {"embeddings.class_embedding": "embeddings.class_token", "embeddings.patch_embedding": "embeddings.patches",
     "embeddings.position_embedding.weight": "embeddings.positions", "pre_layrnorm": "embeddings.norm",
     **_BLOCK, "post_layernorm": "final_norm", **_PAIR},
    heads={"projection": {"visual_projection": "projection.linear"}}, head_config=_clip_projection,
    ignored=("text_model.", "text_projection."), modality="vision", flat=_FLAT, pair="clip",
)
CLIP_TEXT = Family(
    "clip-text", ("clip_text_model",), ("CLIPText",), "text_model.", _clip_text,
    {"embeddings.token_embedding": "embeddings.token", "embeddings.position_embedding": "embeddings.position",
     **_BLOCK, "final_layer_norm": "final_norm", **_PAIR},
    heads={"projection": {"text_projection": "projection.linear"}}, head_config=_clip_projection,
    ignored=("vision_model.", "visual_projection."), pair="clip",
)
SIGLIP_VISION = Family(
    "siglip-vision", ("siglip_vision_model",), ("SiglipVision",), "vision_model.", _siglip_image,
    {"embeddings.patch_embedding": "embeddings.patches",
     "embeddings.position_embedding.weight": "embeddings.positions", **_BLOCK, "post_layernorm": "final_norm",
     "head.probe": "attention_pool.probe", "head.attention.out_proj": "attention_pool.attention.out_proj",
     **{f"head.attention.in_proj_{p}": tuple(f"attention_pool.attention.{x}_proj.{p}" for x in "qkv")
        for p in ("weight", "bias")},
     "head.layernorm": "attention_pool.norm", "head.mlp.fc1": "attention_pool.ffn.up",
     "head.mlp.fc2": "attention_pool.ffn.down", **_PAIR},
    heads={}, head_config=lambda hf, kind: {}, ignored=("text_model.",), modality="vision", flat=_FLAT,
    pair="siglip",
)
SIGLIP_TEXT = Family(
    "siglip-text", ("siglip_text_model",), ("SiglipText",), "text_model.", _siglip_text,
    {"embeddings.token_embedding": "embeddings.token", "embeddings.position_embedding": "embeddings.position",
     **_BLOCK, "final_layer_norm": "final_norm", "head": "projection.linear", **_PAIR},
    heads={}, head_config=lambda hf, kind: {}, ignored=("vision_model.",), pair="siglip",
)
TOWERS = (CLIP_VISION, CLIP_TEXT, SIGLIP_VISION, SIGLIP_TEXT)

# transformers' defaults for what the tower readers take: a pair's config.json written by transformers 4's diffing
# save may keep in text_config and vision_config only the values that differ from their config class's
DEFAULTS: dict[str, dict[str, Any]] = {
    "clip_text_model": dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12,
                            num_attention_heads=8, max_position_embeddings=77, pad_token_id=1, eos_token_id=49407),
    "clip_vision_model": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                              image_size=224, patch_size=32),
    "siglip_text_model": dict(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                              num_attention_heads=12, max_position_embeddings=64, pad_token_id=1),
    "siglip_vision_model": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                num_attention_heads=12, image_size=224, patch_size=16),
}
# a two-tower model_type -> (its class, {tower: (config.json's key, the tower's model_type, the tower's class)})
PAIRS: dict[str, tuple[str, dict[str, tuple[str, str, str]]]] = {
    "clip": ("CLIPModel", {"vision": ("vision_config", "clip_vision_model", "CLIPVisionModelWithProjection"),
                           "text": ("text_config", "clip_text_model", "CLIPTextModelWithProjection")}),
    "siglip": ("SiglipModel", {"vision": ("vision_config", "siglip_vision_model", "SiglipVisionModel"),
                               "text": ("text_config", "siglip_text_model", "SiglipTextModel")}),
}
