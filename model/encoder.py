"""Transformer encoder: embeddings, N attention blocks, pooling, an optional head.

Shape letters: B batch, T sequence length, D d_model, E pooled width, H heads, L layers, C classes,
V vocabulary, M multi-vector width.

With LoRA adapters in the config (model/lora.py), forward takes `adapter` (B,), each row's adapter index (0: the
bare base); it reaches the token embedding (when adapted) directly and the adapted projections through the layer
inputs every block receives.

One encoder for every family the loaders know: the axes of model/config.py choose its parts (positions
in model/positions.py, feed-forward and norms in model/layers.py, pooling in model/pooling.py, heads in
model/heads.py). Beside any of them, the multi-vector outputs (config.multi_vector_size, token_weights) read the
final token states, the same states the pooled vector comes from: ColBERT's per-token vectors and bge-m3's
per-token lexical weights, raw (not normalised, not masked: the torch-free inference/tasks/multi_vector_scores.py does
that, as
the references do after their forward). The defaults are BERT's layout (post-norm), so BERT-family checkpoints
load weight for weight and configs saved before the axes existed build the same network. A vision config
(modality "vision") reads pixel values instead of token ids: model/vision.py turns them into the token sequence,
and everything after the embeddings is the same encoder. The towers of CLIP and SigLIP (model/towers.py) are
this encoder too: the final norm on the pooled vector alone (pooled_norm), pooling at the end token by the ids or by
SigLIP's attention probe (model/probe.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.attention import MultiHeadSelfAttention, Stream, attention_weights, build_mask, padding_mask
from model.config import EncoderConfig
from model.heads import ClassificationHead, MaskedLMHead, TokenHead
from model.layers import FeedForward, norm
from model.lora import embed, embedding, linear
from model.pooling import Projection, mean_pool, pool
from model.positions import AbsolutePositions, RelativePositionBias, RotaryAngles
from model.probe import AttentionPool
from model.vision import PatchEmbeddings

__all__ = ["Encoder", "EncoderBlock", "EncoderOutput", "mean_pool"]


@dataclass
class EncoderOutput:
    token_states: Tensor  # (B, T, D)
    embedding: Tensor  # (B, E), pooled, projected (and L2-normalised when configured)
    logits: Tensor | None  # (B, C) sequence, (B, T, C) tokens or (B, T, V) mlm head; None without a head
    attentions: Tensor | None  # (B, l, h, T, T) when asked for: the chosen layers and heads (all: L, H)
    multi_vectors: Tensor | None = None  # (B, T, M) multi_vector(token_states), raw; None unless configured
    token_weights: Tensor | None = None  # (B, T) relu(token_weight(token_states)); None unless configured


@dataclass
class LayerInputs:
    """What a block reads besides its states, shared by all blocks of one kind (full, i.e. global, or local)."""

    mask: Tensor  # (B, 1, 1|T, T) boolean
    bias: Tensor | None  # (1, H, T, T) relative-position bias
    rotary: tuple[Tensor, Tensor] | None  # cos, sin: (1, 1, T, d_k) each
    window: int = 0  # > 0: attend within it over bands (model/attention.py); mask is then the padding mask
    adapter: Tensor | None = None  # (B,) int64: each row's LoRA adapter (model/lora.py); None: the base
    stream: Stream | None = None  # attend by model.attention.streamed_attention under this mask (mask: unused)


class Embeddings(nn.Module):
    """Token embeddings (times embedding_scale) + position + token-type embeddings (each where the config has it),
    then a norm (where the config has it). The token table may carry LoRA adapters (model/lora.py), added to the
    looked-up rows before the scale, as PEFT scales a scaled embedding's adapter output too."""

    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.token = embedding(c, c.vocab_size, c.d_model, c.pad_token_id)
        self.position = None if c.position_embedding == "none" else AbsolutePositions(
            c.max_length, c.d_model, c.pad_token_id if c.position_embedding == "fairseq" else None)
        self.token_type = nn.Embedding(c.type_vocab_size, c.d_model) if c.type_vocab_size else None
        self.norm = norm(c) if c.embedding_norm else nn.Identity()
        self.scale = c.embedding_scale
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None,
                adapter: Tensor | None = None) -> Tensor:
        x = embed(self.token, input_ids, adapter)  # (B, T, D)
        if self.scale != 1.0:
            x = x * self.scale
        if self.position is not None:
            x = x + self.position(attention_mask)  # (B|1, T, D)
        if self.token_type is not None:
            x = x + self.token_type(token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids))
        return self.dropout(self.norm(x))  # (B, T, D)


class EncoderBlock(nn.Module):
    """Attention and feed-forward, each with a residual and a norm: post-norm (BERT), pre-norm (ModernBERT, the
    decoders) or sandwich (Gemma: pre-norm, and each sub-block's output normalised before the residual).
    adapted: its projections carry the config's LoRA adapters (the encoder's blocks; an attention head's is not)."""

    def __init__(self, c: EncoderConfig, local: bool = False, first: bool = False, adapted: bool = True) -> None:
        super().__init__()
        self.pre_norm, self.local = c.norm_position in ("pre", "sandwich"), local
        adapt = c if adapted else c.replace(adapters=(), adapter_rank=0, adapter_targets=())
        self.attention = MultiHeadSelfAttention(
            c.d_model, c.num_heads, c.attention_dropout, c.attention_bias, num_kv_heads=c.kv_heads,
            head_dim=c.head_dim, scale_dim=c.query_pre_attn_scalar, out_bias=c.attention_out_bias,
            qk_norm=(lambda width: norm(c, width)) if c.qk_norm else None,
            linear=lambda target, width_in, width_out, bias: linear(adapt, target, width_in, width_out, bias),
        )
        skip = self.pre_norm and first and not c.first_attn_norm  # the embedding norm already normalised it
        self.attn_norm = nn.Identity() if skip else norm(c)
        self.ffn = FeedForward(c, adapted)
        self.ffn_norm = norm(c)
        sandwich = c.norm_position == "sandwich"
        self.attn_post_norm = norm(c) if sandwich else nn.Identity()
        self.ffn_post_norm = norm(c) if sandwich else nn.Identity()
        self.attn_scale = LayerScale(c.d_model) if c.layer_scale else nn.Identity()
        self.ffn_scale = LayerScale(c.d_model) if c.layer_scale else nn.Identity()
        self.dropout = nn.Dropout(c.dropout)

    def forward(
        self, x: Tensor, mask: Tensor, bias: Tensor | None = None, rotary: tuple[Tensor, Tensor] | None = None,
        window: int = 0, adapter: Tensor | None = None, stream: Stream | None = None, keep: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """-> (states (B, T, D), the attention's weights, or with `keep` its kept heads' queries and keys)."""
        if self.pre_norm:
            attended, weights = self.attention(self.attn_norm(x), mask, bias, rotary, window, adapter, stream, keep)
            x = x + self.dropout(self.attn_scale(self.attn_post_norm(attended)))
            return x + self.dropout(self.ffn_scale(self.ffn_post_norm(self.ffn(self.ffn_norm(x), adapter)))), weights
        attended, weights = self.attention(x, mask, bias, rotary, window, adapter, stream, keep)
        x = self.attn_norm(x + self.dropout(self.attn_scale(attended)))
        return self.ffn_norm(x + self.dropout(self.ffn_scale(self.ffn(x, adapter)))), weights


class LayerScale(nn.Module):
    """x · w, a learned (D,) vector per sub-block output (DINOv2's layer scale)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.weight  # (B, T, D)


class Encoder(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        c = self.config = config
        self.embeddings: nn.Module = PatchEmbeddings(c) if c.vision else Embeddings(c)
        self.blocks = nn.ModuleList(EncoderBlock(c, c.is_local(i), i == 0) for i in range(c.num_layers))
        self.relative_bias = RelativePositionBias(
            c.relative_attention_buckets, c.relative_attention_max_distance, c.num_heads,
        ) if c.relative_attention_buckets else None
        scaling = (c.rotary_scaling, c.rotary_factor, c.rotary_original_length)
        self.rotary = nn.ModuleDict({
            "full": RotaryAngles(c.head_dim, c.rotary_theta, *scaling),
            "local": RotaryAngles(c.head_dim, c.rotary_local_theta or c.rotary_theta, *scaling),
        }) if c.rotary_theta else None
        self.final_norm = norm(c) if c.norm_position in ("pre", "sandwich") else nn.Identity()  # pooled_norm: pooled
        self.attention_pool = AttentionPool(c) if c.pooling == "probe" else None
        self.projection = Projection(c.d_model, c.projection_size, c.projection_activation, c.projection_bias,
                                     c.projection_chain) if c.projection_size else None
        self.head = _head(c)
        self.multi_vector = nn.Linear(c.d_model, c.multi_vector_size, bias=c.multi_vector_bias) \
            if c.multi_vector_size else None
        self.token_weight = nn.Linear(c.d_model, 1) if c.token_weights else None
        self.apply(self._init_weights)
        if c.head == "mlm" and c.tie_decoder:
            self.head.decoder.weight = self.embeddings.token.weight  # type: ignore[union-attr]

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None, output_attentions: bool = False, adapter: Tensor | None = None,
        layers: Tensor | None = None, heads: Tensor | None = None, pixel_values: Tensor | None = None,
    ) -> EncoderOutput:
        """input_ids (B, T) for text, pixel_values (B, C, H, W) for vision (model/vision.py; every token real).
        adapter (B,) int64: each row's LoRA adapter, an index into config.adapters + 1 (0 or None: the base).
        output_attentions: the maps of the `layers` (l,) and `heads` (h,) chosen (indices; None: all), computed
        after the layers ran the fast way, from those heads' queries and keys (attention_maps): only they are held."""
        x, attention_mask = self.embed(input_ids, pixel_values, attention_mask, token_type_ids, adapter)  # (B, T, D)
        keep = None
        if output_attentions:
            keep = heads if heads is not None else torch.arange(self.config.num_heads, device=x.device)
        inputs = self.layer_inputs(attention_mask, adapter=adapter)
        seen = []
        for block in self.blocks:
            kind = inputs["local" if block.local else "full"]
            x, kept = block(x, kind.mask, kind.bias, kind.rotary, kind.window, kind.adapter, kind.stream, keep)
            if keep is not None:
                seen.append(kept)  # (2, B, h, T, d_k) the kept heads' queries and keys
        x = x if self.config.pooled_norm else self.final_norm(x)
        pooled = self.pooled(x, attention_mask, input_ids)  # (B, E)
        return EncoderOutput(
            token_states=x,
            embedding=F.normalize(pooled, p=2, dim=-1) if self.config.normalize else pooled,
            logits=self.head_logits(x, pooled, attention_mask),
            attentions=self.attention_maps(torch.stack(seen), attention_mask, layers, keep)  # type: ignore[arg-type]
            if keep is not None else None,  # (B, l, h, T, T)
            multi_vectors=self.multi_vector(x) if self.multi_vector is not None else None,  # (B, T, M)
            token_weights=torch.relu(self.token_weight(x)).squeeze(-1) if self.token_weight is not None else None,
        )

    def embed(self, input_ids: Tensor | None, pixel_values: Tensor | None, attention_mask: Tensor | None,
              token_type_ids: Tensor | None, adapter: Tensor | None) -> tuple[Tensor, Tensor]:
        """The first states (B, T, D) and the attention mask (B, T) for the config's modality: token ids (the mask
        given, or all ones) or pixel values (all ones: every patch is real)."""
        if self.config.vision:
            if pixel_values is None or any(t is not None for t in (input_ids, attention_mask, token_type_ids)):
                raise ValueError("a vision encoder reads pixel_values alone (every patch is real: no attention mask)")
            x = self.embeddings(pixel_values)  # (B, T, D)
            return x, torch.ones(x.shape[:2], dtype=torch.long, device=x.device)  # (B, T)
        if input_ids is None or pixel_values is not None:
            raise ValueError("a text encoder reads input_ids, not pixel_values")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        return self.embeddings(input_ids, attention_mask, token_type_ids, adapter), attention_mask  # (B, T, D), (B, T)

    def attention_maps(self, seen: Tensor, attention_mask: Tensor, layers: Tensor | None, heads: Tensor) -> Tensor:
        """The chosen layers' maps from every layer's kept queries and keys `seen` (L, 2, B, h, T, d_k), under each
        layer's own mask (global or local) and the relative bias of the kept heads -> (B, l, h, T, T)."""
        c = self.config
        if layers is not None:
            seen = seen.index_select(0, layers)  # (l, 2, B, h, T, d_k)
        q, k = seen.unbind(1)  # (l, B, h, T, d_k) each
        mask = build_mask(attention_mask, c.mask_kind, c.window_size)[None]  # (1, B, 1, 1|T, T)
        if any(block.local for block in self.blocks):
            local = torch.tensor([block.local for block in self.blocks], device=q.device)  # (L,)
            if layers is not None:
                local = local.index_select(0, layers)  # (l,)
            near = build_mask(attention_mask, "causal_window" if c.causal else "window", c.window_size)  # (B, 1, T, T)
            local = local[:, None, None, None, None]  # (l, 1, 1, 1, 1)
            mask = (local & near[None]) | (~local & mask)  # (l, B, 1, T, T): onnxruntime has no boolean Where
        bias = self.relative_bias(attention_mask.size(1), attention_mask.device).index_select(1, heads) \
            if self.relative_bias is not None else None  # (1, h, T, T)
        weights = attention_weights(q, k, mask, bias, c.query_pre_attn_scalar)  # (l, B, h, T, T)
        return weights.transpose(0, 1)  # (B, l, h, T, T)

    def layer_inputs(self, attention_mask: Tensor, adapter: Tensor | None = None) -> dict[str, LayerInputs]:
        """Mask, relative bias, rotary angles and each row's adapter for the global layers and, when there are
        any, the local ones. The local layers attend over bands, O(T x window) (not with a relative bias, which is
        (T, T) anyway, nor under a causal mask, whose window is one-sided; those take the full window mask).
        Not training (streaming has no attention dropout), a model that streams (config.streams) attends in its
        global layers, and in causal local ones, by model.attention.streamed_attention: no (T, T) mask is built
        for them."""
        c, T, device = self.config, attention_mask.size(1), attention_mask.device
        bias = self.relative_bias(T, device) if self.relative_bias is not None else None  # (1, H, T, T)
        window = c.window_size if bias is None and not c.causal else 0
        stream = c.streams and not self.training
        streams = {"full": Stream(attention_mask, c.causal), "local": Stream(attention_mask, True, c.window_size)}
        kinds = {"full": padding_mask(attention_mask) if stream else build_mask(
            attention_mask, c.mask_kind, c.window_size)}  # (B, 1, 1|T, T)
        if any(block.local for block in self.blocks):
            kinds["local"] = padding_mask(attention_mask) if window or stream else build_mask(
                attention_mask, "causal_window" if c.causal else "window", c.window_size)  # (B, 1, 1|T, T)
        return {kind: LayerInputs(mask, bias, self.rotary[kind](T, device) if self.rotary is not None else None,
                                  window if kind == "local" else 0, adapter,
                                  streams[kind] if stream and (kind == "full" or not window) else None)
                for kind, mask in kinds.items()}

    def pooled(self, token_states: Tensor, attention_mask: Tensor, input_ids: Tensor | None = None) -> Tensor:
        """The embedding before L2 normalisation: pooled (by the attention probe, model/probe.py, or by
        model/pooling.py's mode, which for a text tower's end token reads the ids), normalised where the final norm
        is the pooled vector's (CLIP's vision tower), then projected when there is a projection."""
        c = self.config
        if self.attention_pool is not None:
            pooled = self.attention_pool(token_states)  # (B, D)
        else:
            pooled = pool(c.pooling, token_states, attention_mask, input_ids, c.eos_token_id)  # (B, D)
        if c.pooled_norm:
            pooled = self.final_norm(pooled)  # (B, D)
        return self.projection(pooled) if self.projection is not None else pooled  # (B, E)

    def head_logits(self, token_states: Tensor, pooled: Tensor, attention_mask: Tensor) -> Tensor | None:
        if isinstance(self.head, ClassificationHead):
            mask = build_mask(attention_mask, self.config.mask_kind, self.config.window_size)  # (B, 1, 1|T, T)
            return self.head(token_states, pooled, mask, attention_mask)  # (B, C)
        return self.head(token_states) if self.head is not None else None  # (B, T, C) or (B, T, V)


def _head(c: EncoderConfig) -> nn.Module | None:
    if c.head == "tokens":
        return TokenHead(c)
    if c.head == "mlm":
        return MaskedLMHead(c)
    if c.head == "none":
        return None
    return ClassificationHead(c, EncoderBlock(c, adapted=False) if c.head == "attention" else None)
