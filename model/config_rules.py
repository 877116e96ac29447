"""What an `EncoderConfig` may hold: the choices of each axis, what LoRA adapters may adapt, and the checks a
config passes when it is made (`check`, from EncoderConfig.__post_init__): sizes, choices, the mask, positions,
the modality, labels and adapters, each refused with a ValueError that names the field."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from model.config import EncoderConfig

POOLINGS = ("mean", "cls", "max", "lasttoken", "weightedmean", "mean_sqrt_len", "end_token", "max_id", "last_position",
            "probe")
MASK_KINDS = ("full", "causal", "window")
NORM_KINDS = ("layer", "rms", "rms_one_plus")
NORM_POSITIONS = ("post", "pre", "sandwich")
LAYER_TYPES = ("full", "sliding")
HEADS = ("none", "linear", "pooler", "attention", "tokens", "mlm")
SEQUENCE_HEADS = ("linear", "pooler", "attention")
POSITION_EMBEDDINGS = ("absolute", "fairseq", "none", "grid")
MODALITIES = ("text", "vision")
ACTIVATIONS = ("gelu", "gelu_tanh", "quick_gelu", "relu", "silu", "tanh", "identity")
ROTARY_SCALINGS = ("default", "linear", "dynamic")
HEAD_POOLINGS = ("cls", "mean")
TEXT_POOLINGS = ("end_token", "max_id")  # the text towers' poolings that read the token ids (model/pooling.py)


def check(c: EncoderConfig) -> None:
    """ValueError naming the first field of `c` that is out of its range or choices."""
    for each in (_check_sizes, _check_choices, _check_mask, _check_positions, _check_modality, _check_pooling,
                 _check_labels, _check_adapters):
        each(c)


def _check_sizes(c: EncoderConfig) -> None:
    positive = ("d_model", "num_heads", "num_layers", "d_ff", "max_length", "global_attn_every")
    for name in positive:
        if getattr(c, name) <= 0:
            raise ValueError(f"{name} must be positive, got {getattr(c, name)}")
    if c.d_model % c.num_heads and not c.head_size:
        raise ValueError(
            f"d_model ({c.d_model}) must be divisible by num_heads ({c.num_heads}) "
            "so every head gets the same dimension (or set head_size)"
        )
    if c.num_kv_heads < 0 or c.head_size < 0 or c.query_pre_attn_scalar < 0 or c.embedding_scale <= 0:
        raise ValueError("num_kv_heads, head_size and query_pre_attn_scalar must be 0 or more, "
                         "embedding_scale positive")
    if c.num_heads % c.kv_heads:
        raise ValueError(f"num_heads ({c.num_heads}) must be a multiple of num_kv_heads ({c.kv_heads}): "
                         "each key/value head serves the same number of query heads")
    for name in ("dropout", "attention_dropout", "head_dropout"):
        if not 0.0 <= getattr(c, name) < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {getattr(c, name)}")
    if not 0 <= c.max_seq_length <= c.position_limit:
        raise ValueError(f"max_seq_length ({c.max_seq_length}) must be between 0 and the position limit "
                         f"({c.position_limit}, max_length {c.max_length})")
    if c.layer_norm_eps <= 0:
        raise ValueError(f"layer_norm_eps must be positive, got {c.layer_norm_eps}")
    for name in ("type_vocab_size", "projection_size", "relative_attention_buckets", "multi_vector_size"):
        if getattr(c, name) < 0:
            raise ValueError(f"{name} must be 0 or more, got {getattr(c, name)}")


def _check_choices(c: EncoderConfig) -> None:
    for name, allowed in (
        ("pooling", POOLINGS), ("norm_position", NORM_POSITIONS), ("mask_kind", MASK_KINDS), ("head", HEADS),
        ("norm_kind", NORM_KINDS), ("modality", MODALITIES),
        ("position_embedding", POSITION_EMBEDDINGS), ("activation", ACTIVATIONS), ("rotary_scaling", ROTARY_SCALINGS),
        ("projection_activation", ACTIVATIONS), ("head_activation", ACTIVATIONS), ("head_pooling", HEAD_POOLINGS),
    ):
        if getattr(c, name) not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {getattr(c, name)!r}")
    for size, act, _ in c.projection_chain:
        if size <= 0 or act not in ACTIVATIONS or not c.projection_size:
            raise ValueError(f"projection_chain entries follow a projection and need a positive width and one of "
                             f"{', '.join(ACTIVATIONS)}; got {(size, act)}")


def _check_mask(c: EncoderConfig) -> None:
    if c.mask_kind == "window" and c.window_size <= 0:
        raise ValueError("mask_kind 'window' needs a positive window_size")
    if any(c.is_local(i) for i in range(c.num_layers)) and c.window_size <= 0:
        raise ValueError("local layers (layer_types 'sliding' or global_attn_every > 1) need a positive window_size")
    if c.layer_types and (len(c.layer_types) != c.num_layers or set(c.layer_types) - set(LAYER_TYPES)):
        raise ValueError(f"layer_types must name one of {', '.join(LAYER_TYPES)} for each of the {c.num_layers} "
                         f"layers; got {list(c.layer_types)}")


def _check_positions(c: EncoderConfig) -> None:
    if c.rotary_theta < 0 or c.rotary_local_theta < 0:
        raise ValueError("rotary_theta and rotary_local_theta must be 0 (no rotary) or positive")
    if c.rotary_theta and c.head_dim % 2:
        raise ValueError(f"rotary positions need an even head dimension, got {c.head_dim}")
    _check_rotary_scaling(c)
    if c.relative_attention_buckets and c.relative_attention_buckets % 4:
        raise ValueError(f"relative_attention_buckets must be a multiple of 4, got {c.relative_attention_buckets}")
    if c.position_embedding == "fairseq" and c.max_length <= c.pad_token_id + 1:
        raise ValueError("fairseq positions start at pad_token_id + 1: max_length must be larger")


def _check_rotary_scaling(c: EncoderConfig) -> None:
    if c.rotary_scaling != "default" and not c.rotary_theta:
        raise ValueError(f"rotary_scaling {c.rotary_scaling!r} needs rotary positions (rotary_theta > 0)")
    if c.rotary_factor <= 0 or (c.rotary_scaling == "default" and c.rotary_factor != 1.0):
        raise ValueError(f"rotary_factor must be positive, and 1 without rotary scaling; got {c.rotary_factor} "
                         f"with rotary_scaling {c.rotary_scaling!r}")
    if (c.rotary_scaling == "dynamic") != (c.rotary_original_length > 0) or c.rotary_original_length < 0:
        raise ValueError("rotary_original_length is the dynamic scaling's original length: positive with "
                         f"rotary_scaling 'dynamic', 0 otherwise; got {c.rotary_original_length} with "
                         f"{c.rotary_scaling!r}")


def _check_modality(c: EncoderConfig) -> None:
    """Text reads token ids (a vocabulary, no image fields); vision reads pixels (model/vision.py): a patch grid, the
    grid's positions (max_length rows: the class token's and one per patch), no vocabulary or token types."""
    if not c.vision:
        if c.vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {c.vocab_size}")
        if c.image_size or c.patch_size or c.register_tokens or c.position_embedding == "grid":
            raise ValueError("image_size, patch_size, register_tokens and position_embedding 'grid' are the vision "
                             "modality's; this config reads text")
        return
    if c.image_size <= 0 or c.patch_size <= 0 or c.num_channels <= 0 or c.register_tokens < 0:
        raise ValueError(f"vision needs a positive image_size, patch_size and num_channels and register_tokens >= 0; "
                         f"got {c.image_size}, {c.patch_size}, {c.num_channels}, {c.register_tokens}")
    if c.image_size < c.patch_size:
        raise ValueError(f"image_size ({c.image_size}) holds no patch of patch_size {c.patch_size}")
    rows = int(c.class_token) + c.grid_size ** 2
    if c.position_embedding != "grid" or c.max_length != rows:
        first = "1 + " if c.class_token else ""
        raise ValueError(f"vision positions are position_embedding 'grid' with max_length {first}(image_size // "
                         f"patch_size)^2 = {rows} rows; got {c.position_embedding!r}, {c.max_length}")
    if c.pooling in TEXT_POOLINGS:
        raise ValueError(f"pooling {c.pooling!r} reads token ids; a vision encoder reads pixels")
    if c.vocab_size or c.type_vocab_size or c.causal or c.rotary_theta or c.relative_attention_buckets:
        raise ValueError("vision reads no token ids: vocab_size and type_vocab_size 0, and no causal mask, rotary "
                         "or relative positions")


def _check_pooling(c: EncoderConfig) -> None:
    """The towers' axes where they mean something: the attention probe reads every token (no mask: images), the
    pooled vector's own norm is the final norm of a pre-norm stack."""
    if c.pooling == "probe" and not c.vision:
        raise ValueError("pooling 'probe' attends over every token with no mask: a vision encoder's pooling")
    if c.pooled_norm and c.norm_position not in ("pre", "sandwich"):
        raise ValueError("pooled_norm moves the final norm of a pre-norm encoder onto the pooled vector; "
                         f"norm_position {c.norm_position!r} has none")


def _check_labels(c: EncoderConfig) -> None:
    if c.head in ("none", "mlm"):
        if c.num_labels or c.label_names:
            raise ValueError(f"num_labels is set but head is {c.head!r}; choose a classification head")
        return
    if c.num_labels < 1:
        raise ValueError(f"a classification head needs num_labels >= 1, got {c.num_labels}")
    if c.label_names and len(c.label_names) != c.num_labels:
        raise ValueError(
            f"label_names has {len(c.label_names)} names but num_labels is {c.num_labels}"
        )


# what LoRA adapters may adapt: the token embedding table (the one target outside the blocks) and the block projections
EMBEDDING_TARGET = "embeddings.token"
ADAPTER_TARGETS = (EMBEDDING_TARGET, "attention.q_proj", "attention.k_proj", "attention.v_proj",
                   "attention.out_proj", "ffn.up", "ffn.down")


def _check_adapters(c: EncoderConfig) -> None:
    if not c.adapters:
        if c.adapter_rank or c.adapter_targets:
            raise ValueError("adapter_rank and adapter_targets are set but there are no adapters")
        return
    if len(set(c.adapters)) != len(c.adapters) or not all(c.adapters):
        raise ValueError(f"adapter names must be distinct and non-empty; got {list(c.adapters)}")
    if c.adapter_rank <= 0 or not c.adapter_targets:
        raise ValueError("adapters need a positive adapter_rank and at least one adapter target")
    if c.vision and EMBEDDING_TARGET in c.adapter_targets:
        raise ValueError(f"{EMBEDDING_TARGET} is a token table; a vision encoder has none to adapt")
    unknown = sorted(set(c.adapter_targets) - set(ADAPTER_TARGETS))
    if unknown:
        raise ValueError(f"adapter_targets {unknown} are not the token embedding or projections of a block; "
                         f"supported: {', '.join(ADAPTER_TARGETS)}")
