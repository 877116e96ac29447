"""Transformer encoder: embeddings, N attention blocks, pooling, optional classification head.

Shape letters: B batch, T sequence length, D d_model, H heads, L layers, C classes.
The layout follows BERT (post-norm by default) so BERT-family checkpoints load weight for weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.attention import MultiHeadSelfAttention, build_mask
from model.config import EncoderConfig


@dataclass
class EncoderOutput:
    token_states: Tensor  # (B, T, D)
    embedding: Tensor  # (B, D), pooled (and L2-normalised when configured)
    logits: Tensor | None  # (B, C) when there is a head
    attentions: Tensor | None  # (B, L, H, T, T) when asked for


class Embeddings(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.token = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_token_id)
        self.position = nn.Embedding(c.max_length, c.d_model)
        self.token_type = nn.Embedding(c.type_vocab_size, c.d_model)
        self.norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        positions = torch.arange(input_ids.size(1), device=input_ids.device)[None]  # (1, T)
        x = self.token(input_ids) + self.position(positions) + self.token_type(token_type_ids)
        return self.dropout(self.norm(x))  # (B, T, D)


class FeedForward(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.up = nn.Linear(c.d_model, c.d_ff)
        self.down = nn.Linear(c.d_ff, c.d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.gelu(self.up(x)))


class EncoderBlock(nn.Module):
    """Attention and feed-forward, each with a residual and a layer norm (post- or pre-norm)."""

    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.pre_norm = c.norm_position == "pre"
        self.attention = MultiHeadSelfAttention(c.d_model, c.num_heads, c.attention_dropout)
        self.attn_norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.ffn = FeedForward(c)
        self.ffn_norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        if self.pre_norm:
            attended, weights = self.attention(self.attn_norm(x), mask)
            x = x + self.dropout(attended)
            return x + self.dropout(self.ffn(self.ffn_norm(x))), weights
        attended, weights = self.attention(x, mask)
        x = self.attn_norm(x + self.dropout(attended))
        return self.ffn_norm(x + self.dropout(self.ffn(x))), weights


def mean_pool(token_states: Tensor, attention_mask: Tensor) -> Tensor:
    """Average of the real tokens' states: (B, T, D), (B, T) -> (B, D)."""
    weights = attention_mask.to(token_states.dtype).unsqueeze(-1)  # (B, T, 1)
    total = (token_states * weights).sum(dim=1)  # (B, D)
    return total / weights.sum(dim=1).clamp(min=1e-9)


class ClassificationHead(nn.Module):
    """linear: on the pooled vector; pooler: BERT's tanh pooler on [CLS];
    attention: one extra attention block of our own over the token states, mean-pooled."""

    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.kind = c.head
        if c.head == "pooler":
            self.pooler = nn.Linear(c.d_model, c.d_model)
        if c.head == "attention":
            self.block = EncoderBlock(c)
        self.dropout = nn.Dropout(c.head_dropout)
        self.classifier = nn.Linear(c.d_model, c.num_labels)

    def forward(self, token_states: Tensor, pooled: Tensor, mask: Tensor, attention_mask: Tensor) -> Tensor:
        if self.kind == "pooler":
            pooled = torch.tanh(self.pooler(token_states[:, 0]))  # (B, D)
        elif self.kind == "attention":
            states, _ = self.block(token_states, mask)  # (B, T, D)
            pooled = mean_pool(states, attention_mask)
        return self.classifier(self.dropout(pooled))  # (B, C)


class Encoder(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.blocks = nn.ModuleList(EncoderBlock(config) for _ in range(config.num_layers))
        self.final_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) \
            if config.norm_position == "pre" else nn.Identity()
        self.head = ClassificationHead(config) if config.head != "none" else None
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None, output_attentions: bool = False,
    ) -> EncoderOutput:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        mask = build_mask(attention_mask, self.config.mask_kind, self.config.window_size)
        x = self.embeddings(input_ids, token_type_ids)  # (B, T, D)
        layers = []
        for block in self.blocks:
            x, weights = block(x, mask)
            layers.append(weights)  # (B, H, T, T)
        x = self.final_norm(x)
        return EncoderOutput(
            token_states=x,
            embedding=self.pool(x, attention_mask),
            logits=self.head(x, self._pooled(x, attention_mask), mask, attention_mask) if self.head else None,
            attentions=torch.stack(layers, dim=1) if output_attentions else None,  # (B, L, H, T, T)
        )

    def _pooled(self, token_states: Tensor, attention_mask: Tensor) -> Tensor:
        if self.config.pooling == "cls":
            return token_states[:, 0]  # (B, D)
        return mean_pool(token_states, attention_mask)

    def pool(self, token_states: Tensor, attention_mask: Tensor) -> Tensor:
        pooled = self._pooled(token_states, attention_mask)
        return F.normalize(pooled, p=2, dim=-1) if self.config.normalize else pooled
