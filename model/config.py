"""Encoder configuration: a frozen dataclass that travels with the weights.

Every dimension a consumer needs (export, service) is read from here, never guessed. The families the
loaders know (model/families/: BERT, RoBERTa/XLM-R/CamemBERT, DistilBERT, MPNet, ModernBERT, NomicBERT, GTE,
jina-embeddings-v3, the decoders, and the vision transformers ViT and DINOv2) are one encoder with a few
axes set differently, as x-transformers exposes them as flags; the defaults are BERT's, so configs saved
before an axis existed load as they did.

    positions      position_embedding: learned "absolute" table indexed 0..T-1, "fairseq" (RoBERTa, MPNet:
                   real tokens count from pad_token_id + 1) or "none"; relative_attention_buckets > 0: MPNet's
                   bucketed relative bias, one table shared by all layers; rotary_theta > 0: rotary q/k
                   (ModernBERT, NomicBERT, GTE, jina-v3, decoders; rotary_local_theta for the local layers);
                   rotary_scaling stretches every layer's frequencies as transformers' rope type of that name:
                   default (none), linear (/ rotary_factor), dynamic (NTK: the base grows once an input passes
                   rotary_original_length tokens), see model/positions.py
    token types    type_vocab_size 0 (no table), 1 (one row, always 0), 2 (segment A / B)
    norms          norm_kind layer (LayerNorm), rms (RMSNorm: Llama, Qwen) or rms_one_plus (Gemma's x · (1 + w));
                   norm_position post (BERT), pre (ModernBERT, decoders) or sandwich (Gemma: pre, and a norm on
                   each sub-block's output before the residual); norm_bias; embedding_norm; pre-norm ends with a
                   final norm, and first_attn_norm=False skips the first block's attention norm (its input is
                   normalised); qk_norm: an RMS norm over each head's query and key (Qwen3, Gemma3)
    feed-forward   activation; gated_ffn: up projects to 2 x d_ff, act(first half) * second half (GeGLU, SwiGLU)
    biases         attention_bias (q, k, v), attention_out_bias (out; None: as attention_bias), ffn_bias (up),
                   ffn_down_bias (down; None: as ffn_bias; GTE's gated MLP has it on down only)
    heads          num_kv_heads < num_heads: each key/value head serves num_heads / num_kv_heads query heads
                   (grouped-query attention); head_size: a head width other than d_model / num_heads;
                   query_pre_attn_scalar: scores scaled by 1 / sqrt(it) instead of 1 / sqrt(head width)
    embeddings     embedding_scale multiplies the token embeddings (Gemma: sqrt(d_model))
    masks          mask_kind full (bidirectional), causal (the seed's tril: decoders) or window (every layer local)
    layer pattern  layer_types ("full" / "sliding" per layer) or, when empty, global_attn_every n: layers
                   i % n != 0 are local. A local layer attends within window_size of each token (|i - j| <=
                   window_size, and j <= i too under a causal mask, as decoders' sliding windows do)
    pooling        pooling mode (the text towers' end_token / max_id by the token ids, last_position; the attention
                   pool "probe", SigLIP's, model/probe.py), then pooled_norm (CLIP's post_layernorm), then an
                   optional projection (sentence-transformers' Dense; projection_chain: the
                   Dense modules after the first, EmbeddingGemma has two), then normalize
    heads          none | linear | pooler | attention (sequence logits) | tokens (token logits) | mlm
    multi-vector   beside any head, on the final token states: multi_vector_size M > 0 projects every token to M
                   (multi_vector_bias: bge-m3's colbert_linear has a bias, PyLate's Dense and colbert-ai's linear
                   do not); token_weights: relu(Linear(D, 1)) per token (bge-m3's sparse_linear)
    vision         modality "vision": the input is pixel values (B, C, H, W), not token ids (model/vision.py). A patch
                   embedding (a Conv2d of stride patch_size over num_channels channels) cuts the image into patches,
                   a class token goes first, then register_tokens learned tokens (DINOv2 with registers); positions
                   are position_embedding "grid": a learned table of the class token's row and one row per patch of
                   the image_size // patch_size square grid (max_length rows in all), resampled bicubically to the
                   input's grid (position_antialias: with an antialiasing filter when it shrinks, as DINOv2 with
                   registers does); layer_scale multiplies each sub-block's output by a learned vector (DINOv2);
                   class_token False (SigLIP: the grid alone), patch_bias, embedding_norm (CLIP's pre_layrnorm)
    two towers     CLIP's and SigLIP's image and text encoders are each this encoder (model/towers.py): the pair's
                   logit_scale and logit_bias travel in both towers' configs; pad_to_max_length (SigLIP's text)
    adapters       LoRA adapters over the one base (model/lora.py): their names in index order (index i + 1 is
                   adapters[i], index 0 the bare base), the rank every adapter is padded to (adapter_rank) and
                   the modules that carry them (adapter_targets: the token embedding "embeddings.token" and block
                   projections such as "attention.q_proj", "ffn.up")
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.config_rules import check

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class EncoderConfig:
    """Hyper-parameters of the encoder; validated on construction."""

    vocab_size: int = 30522
    d_model: int = 256
    num_heads: int = 8
    num_layers: int = 4
    d_ff: int = 1024
    max_length: int = 512  # size of the position table (rotary: the longest input)
    max_seq_length: int = 0  # longest input the model is meant to see (sentence-transformers' limit); 0: max_length
    dropout: float = 0.1
    attention_dropout: float = 0.1
    type_vocab_size: int = 2
    pad_token_id: int = 0
    layer_norm_eps: float = 1e-12
    norm_position: str = "post"
    mask_kind: str = "full"
    window_size: int = 0
    pooling: str = "mean"
    normalize: bool = False
    head: str = "none"
    num_labels: int = 0
    label_names: tuple[str, ...] = field(default_factory=tuple)
    head_dropout: float = 0.1
    # architecture axes (module docstring); defaults are BERT's
    architecture: str = "bert"
    position_embedding: str = "absolute"
    relative_attention_buckets: int = 0
    relative_attention_max_distance: int = 128
    rotary_theta: float = 0.0
    rotary_local_theta: float = 0.0
    rotary_scaling: str = "default"
    rotary_factor: float = 1.0
    rotary_original_length: int = 0  # dynamic scaling: the length past which the base grows
    global_attn_every: int = 1
    activation: str = "gelu"
    gated_ffn: bool = False
    attention_bias: bool = True
    ffn_bias: bool = True
    norm_bias: bool = True
    embedding_norm: bool = True
    first_attn_norm: bool = True
    norm_kind: str = "layer"
    qk_norm: bool = False
    attention_out_bias: bool | None = None
    ffn_down_bias: bool | None = None  # None: as ffn_bias
    num_kv_heads: int = 0  # 0: num_heads (every query head has its own key/value head)
    head_size: int = 0  # 0: d_model / num_heads
    query_pre_attn_scalar: float = 0.0  # 0: the head width
    embedding_scale: float = 1.0
    layer_types: tuple[str, ...] = field(default_factory=tuple)  # "full" / "sliding" per layer; (): global_attn_every
    # sentence-transformers' Dense after pooling: 0 = none
    projection_size: int = 0
    projection_activation: str = "identity"
    projection_bias: bool = True
    projection_chain: tuple[tuple[int, str, bool], ...] = field(default_factory=tuple)  # later Denses: (out, act, bias)
    # heads: pooler/tokens/mlm transform = dense -> head_activation -> norm (when head_norm)
    head_pooling: str = "cls"
    head_activation: str = "tanh"
    head_norm: bool = False
    head_bias: bool = True
    head_transform: bool = False  # tokens head: the transform before the classifier (ModernBERT)
    tie_decoder: bool = True  # mlm head: the decoder shares the token embedding matrix
    # vision (model/vision.py): modality "vision" reads pixel values through a patch embedding
    modality: str = "text"
    image_size: int = 0  # side of the square grid the position table was trained on, in pixels; 0 for text
    patch_size: int = 0
    num_channels: int = 3
    register_tokens: int = 0
    position_antialias: bool = False
    layer_scale: bool = False
    class_token: bool = True  # a learned token before the patches (CLIP, ViT, DINOv2); SigLIP has none
    patch_bias: bool = True  # the patch Conv2d's bias (CLIP's has none)
    pooled_norm: bool = False  # the final norm normalises the pooled vector only (CLIP's post_layernorm)
    # the text towers' pooling and the pair's scores (model/towers.py)
    eos_token_id: int = 0  # pooling "end_token": the first position holding this id
    pad_to_max_length: bool = False  # texts are padded to max_length and read with no attention mask (SigLIP)
    logit_scale: float | None = None  # a two-tower checkpoint's log temperature: logits = exp(it) · cos + bias
    logit_bias: float | None = None  # SigLIP's bias on the pair's logits (sigmoid); None: CLIP's softmax, no bias
    # LoRA adapters (model/lora.py): names in index order (index 0 is the base), one padded rank, the targets
    adapters: tuple[str, ...] = field(default_factory=tuple)
    adapter_rank: int = 0
    adapter_targets: tuple[str, ...] = field(default_factory=tuple)
    # multi-vector outputs on the final token states (model/encoder.py): 0 = none
    multi_vector_size: int = 0  # M: width of each token's vector (ColBERT, bge-m3's colbert_linear)
    multi_vector_bias: bool = True  # bge-m3's colbert_linear has one; PyLate's Dense and colbert-ai's linear do not
    token_weights: bool = False  # bge-m3's sparse_linear: relu(Linear(D, 1)) per token

    def __post_init__(self) -> None:
        object.__setattr__(self, "label_names", tuple(self.label_names))
        object.__setattr__(self, "layer_types", tuple(self.layer_types))
        object.__setattr__(self, "adapters", tuple(self.adapters))
        object.__setattr__(self, "adapter_targets", tuple(self.adapter_targets))
        object.__setattr__(self, "projection_chain", tuple(
            (int(size), str(act), bool(bias)) for size, act, bias in self.projection_chain))
        check(self)
        if self.head_dim < 32:
            log.warning(
                "head dimension %d (%d heads over d_model %d) is under 32; heads this small "
                "often learn poorly", self.head_dim, self.num_heads, self.d_model,
            )

    @property
    def serving_length(self) -> int:
        """Inputs are truncated to this many tokens when embedding or serving."""
        return self.max_seq_length or self.position_limit

    @property
    def position_limit(self) -> int:
        """The longest input the positions reach: max_length, less the pad_token_id + 1 rows that fairseq
        positions skip (RoBERTa's 514-row table holds 512 tokens)."""
        return self.max_length - (self.pad_token_id + 1 if self.position_embedding == "fairseq" else 0)

    @property
    def vision(self) -> bool:
        return self.modality == "vision"

    @property
    def grid_size(self) -> int:
        """Patches along each side of the grid the position table covers (vision; 0 for text)."""
        return self.image_size // self.patch_size if self.vision else 0

    def image_tokens(self, height: int, width: int) -> int:
        """Tokens of one (height, width) image (vision): the class token, the registers, one per whole patch."""
        return int(self.class_token) + self.register_tokens + (height // self.patch_size) * (width // self.patch_size)

    @property
    def labels(self) -> list[str]:
        """Class names in logit order: label_names, or "0" .. "C-1" when none were given; [] without labels."""
        if self.head in ("none", "mlm"):
            return []
        return list(self.label_names) or [str(i) for i in range(self.num_labels)]

    @property
    def head_dim(self) -> int:
        return self.head_size or self.d_model // self.num_heads

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def causal(self) -> bool:
        return self.mask_kind == "causal"

    @property
    def embedding_size(self) -> int:
        """Width of the pooled embedding: the last projection's output, else d_model."""
        if self.projection_chain:
            return self.projection_chain[-1][0]
        return self.projection_size or self.d_model

    @property
    def streams(self) -> bool:
        """Its fast path's global and causal layers attend by model.attention.streamed_attention, never holding (T, T)
        scores: rotary and causal models and any model past 512 positions, whose inputs can be long. The
        512-position encoders keep the explicit equation, the form onnxruntime's optimiser fuses into its Attention
        operator (export.variants), and so do a relative-position bias, which is (T, T) itself, and mask_kind window
        (a bidirectional window in every layer, which the streamed kernels do not take)."""
        long = bool(self.rotary_theta) or self.causal or self.position_limit > 512
        return long and not self.relative_attention_buckets and self.mask_kind != "window"

    def is_local(self, layer: int) -> bool:
        """Layer `layer` attends within window_size: layer_types says so, else ModernBERT's pattern (every n-th
        layer is global)."""
        if self.layer_types:
            return self.layer_types[layer] == "sliding"
        return self.global_attn_every > 1 and layer % self.global_attn_every != 0

    def replace(self, **changes: Any) -> EncoderConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["label_names"] = list(self.label_names)
        data["layer_types"] = list(self.layer_types)
        data["adapters"] = list(self.adapters)
        data["adapter_targets"] = list(self.adapter_targets)
        data["projection_chain"] = [list(dense) for dense in self.projection_chain]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EncoderConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown encoder config keys: {', '.join(unknown)}")
        return cls(**data)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> EncoderConfig:
        return cls.from_dict(json.loads(path.read_text()))
