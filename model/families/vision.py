"""The vision families: ViT and DINOv2 (with and without registers), each its config.json reading and its weight-name
table (model/families/base.py says how tables read); the vision axes themselves are model/vision.py's.

    family   model_type                       classes
    vit      vit                              ViTModel, ViTForImageClassification
    dinov2   dinov2, dinov2_with_registers    Dinov2Model, Dinov2WithRegistersModel

Both are the encoder over patches (modality "vision"): pre-norm LayerNorm blocks, a final norm, no token table, the
class token's final state pooled. They differ on these axes:

    ViT      a GELU MLP (intermediate_size); its pooler (dense, pooler_act: tanh) is the pooled vector's projection,
             as ViTModel's pooler_output is; a checkpoint without one (DINO v1's) pools the class token alone.
             ViTForImageClassification: a linear classifier on the class token's final state (head "linear").
             Positions are resampled at another resolution as transformers' interpolate_pos_encoding=True does
             (without it, transformers refuses any size but image_size)
    DINOv2   layer scale on both sub-blocks; an MLP of hidden_size · mlp_ratio (GELU) or, use_swiglu_ffn, SwiGLU
             (two thirds of it, rounded up to a multiple of 8; the released weights_in holds gate then up, our
             gated `up`'s order); pooler_output is the class token's final state. Positions are resampled whenever
             the grid differs; with registers, num_register_tokens tokens after the class token and an antialiased
             resampling. Dinov2ForImageClassification (class token beside the mean of the patches) is not loaded.

Each table maps the released checkpoints' names (encoder.layer.{i}.attention.attention.query, ..., which transformers
writes back when it saves) and transformers' own module names (layers.{i}.attention.q_proj for ViT,
encoder.layer.{i}.attention.q_proj and mlp.gate_proj / up_proj for DINOv2). Non-square image_size or patch_size
values are refused.
"""

from __future__ import annotations

from typing import Any

from model.families.base import Family, Table, activation, layers


def _side(hf: dict[str, Any], key: str) -> int:
    """image_size or patch_size: an int, or a [height, width] pair that must be square."""
    value = hf[key]
    if isinstance(value, (list, tuple)):
        if len(set(value)) != 1:
            raise ValueError(f"{key} {list(value)} is not square; only square images and patches are supported")
        value = value[0]
    return int(value)


def _body(hf: dict[str, Any], architecture: str, d_ff: int) -> dict[str, Any]:
    """The fields ViT and DINOv2 name alike."""
    image_size, patch_size = _side(hf, "image_size"), _side(hf, "patch_size")
    return dict(
        architecture=architecture, modality="vision", vocab_size=0, type_vocab_size=0, d_model=hf["hidden_size"],
        num_heads=hf["num_attention_heads"], num_layers=hf["num_hidden_layers"], d_ff=d_ff,
        image_size=image_size, patch_size=patch_size, num_channels=hf.get("num_channels", 3),
        max_length=1 + (image_size // patch_size) ** 2, position_embedding="grid", norm_position="pre",
        embedding_norm=False, attention_bias=hf.get("qkv_bias", True), attention_out_bias=True,
        dropout=hf.get("hidden_dropout_prob", 0.0), attention_dropout=hf.get("attention_probs_dropout_prob", 0.0),
        head_dropout=0.0,
    )


def _vit_body(hf: dict[str, Any]) -> dict[str, Any]:
    return {**_body(hf, "vit", hf["intermediate_size"]), "layer_norm_eps": hf.get("layer_norm_eps", 1e-12),
            "activation": activation(hf.get("hidden_act", "gelu"))}


def _vit_head(hf: dict[str, Any], kind: str) -> dict[str, Any]:
    """ViTModel: its pooler as the projection of the class token; ViTForImageClassification: a linear classifier."""
    if kind == "image":
        return dict(head="linear")
    return dict(projection_size=hf.get("pooler_output_size") or hf["hidden_size"],
                projection_activation=activation(hf.get("pooler_act", "tanh")))


def _dinov2_body(hf: dict[str, Any]) -> dict[str, Any]:
    d_ff = int(hf["hidden_size"] * hf.get("mlp_ratio", 4))
    swiglu = bool(hf.get("use_swiglu_ffn", False))
    registers = hf.get("num_register_tokens", 4) if hf.get("model_type") == "dinov2_with_registers" else 0
    return {**_body(hf, "dinov2", (int(d_ff * 2 / 3) + 7) // 8 * 8 if swiglu else d_ff),
            "layer_norm_eps": hf.get("layer_norm_eps", 1e-6), "layer_scale": True, "gated_ffn": swiglu,
            "activation": "silu" if swiglu else activation(hf.get("hidden_act", "gelu")),
            "register_tokens": registers, "position_antialias": bool(registers)}


_EMBEDDINGS: Table = {
    "embeddings.cls_token": "embeddings.class_token", "embeddings.position_embeddings": "embeddings.positions",
    "embeddings.patch_embeddings.projection": "embeddings.patches",
    "embeddings.register_tokens": "embeddings.registers", "layernorm": "final_norm",
}
_RELEASED_ATTENTION: Table = {
    "attention.attention.query": "attention.q_proj", "attention.attention.key": "attention.k_proj",
    "attention.attention.value": "attention.v_proj", "attention.output.dense": "attention.out_proj",
}
_TRANSFORMERS_ATTENTION: Table = {
    "attention.q_proj": "attention.q_proj", "attention.k_proj": "attention.k_proj",
    "attention.v_proj": "attention.v_proj", "attention.o_proj": "attention.out_proj",
}
_VIT_LAYER: Table = {"layernorm_before": "attn_norm", "layernorm_after": "ffn_norm"}
_DINOV2_LAYER: Table = {
    "norm1": "attn_norm", "norm2": "ffn_norm", "layer_scale1.lambda1": "attn_scale.weight",
    "layer_scale2.lambda1": "ffn_scale.weight", "mlp.fc1": "ffn.up", "mlp.fc2": "ffn.down",
    "mlp.weights_in": "ffn.up", "mlp.weights_out": "ffn.down",  # SwiGLU, released: gate and up in one
    "mlp.gate_proj": "ffn.up#0", "mlp.up_proj": "ffn.up#1", "mlp.down_proj": "ffn.down",  # SwiGLU, transformers'
}

VIT = Family(
    "vit", ("vit",), ("ViT",), "vit.", _vit_body,
    {**_EMBEDDINGS, "pooler.dense": "projection.linear",
     **layers("encoder.layer.{i}.", {**_RELEASED_ATTENTION, **_VIT_LAYER, "intermediate.dense": "ffn.up",
                                     "output.dense": "ffn.down"}),
     **layers("layers.{i}.", {**_TRANSFORMERS_ATTENTION, **_VIT_LAYER, "mlp.fc1": "ffn.up", "mlp.fc2": "ffn.down"})},
    heads={"image": {"classifier": "head.classifier"}}, head_config=_vit_head, ignored=("embeddings.mask_token",),
    modality="vision",
)
DINOV2 = Family(
    "dinov2", ("dinov2", "dinov2_with_registers"), ("Dinov2", "Dinov2WithRegisters"), "dinov2.", _dinov2_body,
    {**_EMBEDDINGS,
     **layers("encoder.layer.{i}.", {**_RELEASED_ATTENTION, **_TRANSFORMERS_ATTENTION, **_DINOV2_LAYER})},
    heads={}, head_config=lambda hf, kind: {}, ignored=("embeddings.mask_token",), modality="vision",
)
VISION = (VIT, DINOV2)
