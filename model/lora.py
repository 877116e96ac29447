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
Where a checkpoint's target is part of one of our tensors, the exact equivalent is built (export/adapters.py):
a fused q/k/v target's B split in three over one shared A, and the decoders' gate_proj and up_proj (side by side
in our gated `ffn.up`) as one block-diagonal adapter of rank r_gate + r_up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import EncoderConfig
from model.config_rules import EMBEDDING_TARGET

if TYPE_CHECKING:
    from model.encoder import Encoder

__all__ = ["LoRAEmbedding", "LoRALinear", "LoRAPair", "adapted_encoder", "embed", "embedding", "linear",
           "project"]


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


def adapted_encoder(base: Encoder, adapters: dict[str, dict[str, LoRAPair]]) -> Encoder:
    """A new Encoder: `base`'s weights, and `adapters` (name -> our parameter module name, e.g.
    "blocks.3.attention.q_proj" or "embeddings.token" -> its pair) stacked in their order as indices 1..N, each
    padded to the largest rank of any pair; a projection no adapter targets stays a plain nn.Linear, an
    unadapted token embedding a plain nn.Embedding."""
    from model.encoder import Encoder  # model.encoder imports this module

    if not adapters:
        raise ValueError("adapted_encoder needs at least one adapter")
    if base.config.adapters:
        raise ValueError(f"the base already carries adapters {list(base.config.adapters)}; adapt the bare base")
    pairs = [pair for by_module in adapters.values() for pair in by_module.values()]
    targets = sorted({_target(module) for by_module in adapters.values() for module in by_module})
    config = base.config.replace(adapters=tuple(adapters), adapter_rank=max(p.rank for p in pairs),
                                 adapter_targets=tuple(targets))
    encoder = Encoder(config)
    missing, unexpected = encoder.load_state_dict(base.state_dict(), strict=False)
    if unexpected or any(not name.endswith((".down", ".up")) for name in missing):
        raise ValueError(f"the base does not fit the adapted encoder: missing {missing}, unexpected {unexpected}")
    modules = dict(encoder.named_modules())
    with torch.no_grad():
        for index, by_module in enumerate(adapters.values(), start=1):
            for module, pair in by_module.items():
                _place(modules[module], index, pair, module)
    return encoder.train(base.training)


def _target(module: str) -> str:
    """"blocks.3.attention.q_proj" -> "attention.q_proj"; "embeddings.token" as is."""
    if module == EMBEDDING_TARGET:
        return module
    parts = module.split(".")
    if len(parts) < 3 or parts[0] != "blocks":
        raise ValueError(f"{module!r} is neither the token embedding nor a projection inside a block")
    return ".".join(parts[2:])


def _place(layer: nn.Module, index: int, pair: LoRAPair, module: str) -> None:
    if isinstance(layer, LoRAEmbedding):
        _place_embedding(layer, index, pair)
        return
    if not isinstance(layer, LoRALinear):
        raise ValueError(f"{module} carries no adapters")
    if pair.down.shape[1] != layer.in_features or pair.up.shape[0] != layer.out_features \
            or pair.up.shape[1] != pair.rank:
        raise ValueError(f"{module}: an adapter of shapes A {tuple(pair.down.shape)}, B {tuple(pair.up.shape)} does "
                         f"not fit a ({layer.out_features}, {layer.in_features}) projection (another base?)")
    layer.down[index, : pair.rank] = pair.down  # (r, I) into (R, I): the rest stays zero
    layer.up[index, :, : pair.rank] = pair.up  # (O, r) into (O, R)


def _place_embedding(layer: LoRAEmbedding, index: int, pair: LoRAPair) -> None:
    if pair.down.shape[1] != layer.num_embeddings or pair.up.shape[0] != layer.embedding_dim \
            or pair.up.shape[1] != pair.rank:
        raise ValueError(f"embeddings.token: an adapter of shapes A {tuple(pair.down.shape)}, B "
                         f"{tuple(pair.up.shape)} does not fit a ({layer.num_embeddings}, {layer.embedding_dim}) "
                         "token embedding (another base?)")
    down, up = layer.pair(index)  # (V, R), (D, R)
    down[:, : pair.rank] = pair.down.T  # Aᵀ (V, r) into (V, R): the rest stays zero
    up[:, : pair.rank] = pair.up  # (D, r) into (D, R)
