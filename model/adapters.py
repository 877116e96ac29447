"""An Encoder with LoRA adapters, built from a bare one: every adapter's pairs stacked into the adapted projections.

The primitives (LoRALinear, LoRAEmbedding, LoRAPair) live in model/lora.py, which the encoder imports; building a
whole Encoder belongs here, on the loading side, so the primitives never import the encoder back. The pairs come
from PEFT directories read onto our module names (model/peft.py) or from any caller holding LoRAPairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import nn

from model.checkpoint import LoadedModel
from model.config_rules import EMBEDDING_TARGET
from model.encoder import Encoder
from model.lora import LoRAEmbedding, LoRALinear, LoRAPair
from model.peft import Adapter

__all__ = ["adapted_encoder", "with_adapters"]


def with_adapters(loaded: LoadedModel, adapters: Sequence[Adapter]) -> LoadedModel:
    """`loaded` with `adapters` stacked into its encoder as indices 1..N in this order, and listed on it."""
    encoder = adapted_encoder(loaded.encoder, {adapter.name: adapter.pairs for adapter in adapters})
    return replace(loaded, encoder=encoder.eval(), adapters=tuple(adapters))


def adapted_encoder(base: Encoder, adapters: dict[str, dict[str, LoRAPair]]) -> Encoder:
    """A new Encoder: `base`'s weights, and `adapters` (name -> our parameter module name, e.g.
    "blocks.3.attention.q_proj" or "embeddings.token" -> its pair) stacked in their order as indices 1..N, each
    padded to the largest rank of any pair; a projection no adapter targets stays a plain nn.Linear, an
    unadapted token embedding a plain nn.Embedding."""
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
