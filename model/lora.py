"""LoRA adapters over one base: many adapters stacked in each adapted projection, chosen per row.

Shape letters: B batch, T sequence length, N adapters, R the padded rank, I a projection's input width,
O its output width, r one adapter's own rank, V vocabulary, D d_model.

PEFT's LoRA adds to a linear layer y = x Wᵀ + b the low-rank term s · (x Aᵀ) Bᵀ, A (r, I) and B (O, r), with
s = lora_alpha / r (rsLoRA: lora_alpha / √r). Here every adapter of a projection is stacked: `down` (N + 1, R, I)
holds the A's and `up` (N + 1, O, R) the B's with s folded in, row 0 zeros (index 0 is the bare base). An adapter
of rank r < R is padded with zero rows of A and zero columns of B, which adds exact zeros. Each row of a batch
names its adapter (`adapter`, (B,) int64), and the forward gathers that row's pair:

    y = x Wᵀ + b + (x down[a]ᵀ) up[a]ᵀ

so one graph serves the base and every adapter, mixed in one batch, for the memory of its adapters alone.

The token embedding takes PEFT's embedding LoRA (lora.Embedding): lora_embedding_A (r, V) and lora_embedding_B
(D, r) add s · F.embedding(ids, Aᵀ) Bᵀ to the looked-up rows, which is the linear form above with x the one-hot
of each id. Its stacked `down` is kept as one flat table ((N + 1) · V, R), adapter k's Aᵀ in rows k · V ..
(k + 1) · V - 1, and the forward gathers row adapter · V + id of it: (B, T, R) gathered, never a (B, V, R) copy
of a table, so the graph holds the adapters' bytes and a run adds only (B, T, R). F.embedding's padding_idx only
stops gradients, so the pad id's row is added as PEFT adds it; max_norm, which would renormalise rows, is unset
in every family here (our token embedding has none).
An Encoder with adapters is built from a bare one by model/adapters.py (adapted_encoder): the encoder imports this
module's primitives, so nothing here builds an Encoder. Where a checkpoint's target is part of one of our tensors,
the exact equivalent is built (model/peft.py):
a fused q/k/v target's B split in three over one shared A, and the decoders' gate_proj and up_proj (side by side
in our gated `ffn.up`) as one block-diagonal adapter of rank r_gate + r_up.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import EncoderConfig
from model.config_rules import EMBEDDING_TARGET

__all__ = ["LoRAEmbedding", "LoRALinear", "LoRAPair", "embed", "embedding", "linear", "project"]


class LoRALinear(nn.Linear):
    """nn.Linear (its weight and bias keep their names) plus N stacked adapters of padded rank R."""

    def __init__(self, in_features: int, out_features: int, bias: bool, adapters: int, rank: int) -> None:
        super().__init__(in_features, out_features, bias=bias)
        self.down = nn.Parameter(torch.zeros(adapters + 1, rank, in_features))  # (N + 1, R, I)
        self.up = nn.Parameter(torch.zeros(adapters + 1, out_features, rank))  # (N + 1, O, R)

    def forward(self, x: Tensor, adapter: Tensor | None = None) -> Tensor:  # type: ignore[override]
        """x (B, T, I), adapter (B,) int64 or None (the base for every row) -> (B, T, O)."""
        y = F.linear(x, self.weight, self.bias)  # (B, T, O)
        if adapter is None:
            return y
        down = self.down.index_select(0, adapter)  # (B, R, I); one Gather in the graph (indexing adds copies)
        up = self.up.index_select(0, adapter)  # (B, O, R)
        low = x @ down.transpose(1, 2)  # (B, T, R)
        return y + low @ up.transpose(1, 2)  # (B, T, O)


class LoRAEmbedding(nn.Embedding):
    """nn.Embedding (its weight keeps its name) plus N stacked embedding adapters of padded rank R: down, the
    adapters' Aᵀ as one flat ((N + 1) · V, R) table, and up (N + 1, D, R)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None, adapters: int,
                 rank: int) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx=padding_idx)
        self.down = nn.Parameter(torch.zeros((adapters + 1) * num_embeddings, rank))  # ((N + 1) · V, R)
        self.up = nn.Parameter(torch.zeros(adapters + 1, embedding_dim, rank))  # (N + 1, D, R)

    def forward(self, input_ids: Tensor, adapter: Tensor | None = None) -> Tensor:  # type: ignore[override]
        """input_ids (B, T), adapter (B,) int64 or None (the base for every row) -> (B, T, D)."""
        x = super().forward(input_ids)  # (B, T, D)
        if adapter is None:
            return x
        rows = adapter[:, None] * self.num_embeddings + input_ids  # (B, T): row of (adapter, id) in the flat table
        low = F.embedding(rows, self.down)  # (B, T, R); one Gather of B · T rows
        up = self.up.index_select(0, adapter)  # (B, D, R)
        return x + low @ up.transpose(1, 2)  # (B, T, D)

    def pair(self, index: int) -> tuple[Tensor, Tensor]:
        """Adapter `index`'s (Aᵀ (V, R), up (D, R)) views, zero-padded to R."""
        return self.down[index * self.num_embeddings:(index + 1) * self.num_embeddings], self.up[index]


def embedding(c: EncoderConfig, vocab_size: int, width: int, padding_idx: int | None) -> nn.Embedding:
    """The token embedding table: a LoRAEmbedding when the config's adapters adapt "embeddings.token", else a plain
    nn.Embedding."""
    if c.adapters and EMBEDDING_TARGET in c.adapter_targets:
        return LoRAEmbedding(vocab_size, width, padding_idx, len(c.adapters), c.adapter_rank)
    return nn.Embedding(vocab_size, width, padding_idx=padding_idx)


def embed(table: nn.Embedding, input_ids: Tensor, adapter: Tensor | None) -> Tensor:
    """table(input_ids), with each row's adapter where the table carries adapters."""
    return table(input_ids, adapter) if isinstance(table, LoRAEmbedding) else table(input_ids)


def linear(c: EncoderConfig, target: str, in_features: int, out_features: int, bias: bool) -> nn.Linear:
    """The block projection `target` ("attention.q_proj", "ffn.up", ...): a LoRALinear when the config's adapters
    adapt it, else a plain nn.Linear."""
    if c.adapters and target in c.adapter_targets:
        return LoRALinear(in_features, out_features, bias, len(c.adapters), c.adapter_rank)
    return nn.Linear(in_features, out_features, bias=bias)


def project(layer: nn.Module, x: Tensor, adapter: Tensor | None) -> Tensor:
    """layer(x), with each row's adapter where the layer carries adapters."""
    return layer(x, adapter) if isinstance(layer, LoRALinear) else layer(x)


@dataclass(frozen=True)
class LoRAPair:
    """One adapter's low-rank pair for one of our projections: y += (x downᵀ) upᵀ, PEFT's scaling folded into up."""

    down: Tensor  # (r, I)
    up: Tensor  # (O, r)

    @property
    def rank(self) -> int:
        return self.down.shape[0]
