"""The small pieces every block is built from, each chosen by a config axis.

Shape letters: B batch, T sequence length, D d_model, F d_ff.

    activation    gelu (exact, erf), gelu_tanh (tanh approximation), relu, silu, tanh, identity
    layer_norm    LayerNorm with or without its bias (ModernBERT's norms have none)
    FeedForward   up -> activation -> down (BERT); gated: up projects to 2F, act(first half) * second half
                  (GeGLU, ModernBERT's Wi/Wo)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import EncoderConfig


def activate(x: Tensor, name: str) -> Tensor:
    if name == "gelu":
        return F.gelu(x)
    if name == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu(x)
    if name == "silu":
        return F.silu(x)
    if name == "tanh":
        return torch.tanh(x)
    if name == "identity":
        return x
    raise ValueError(f"unknown activation {name!r}")


def layer_norm(c: EncoderConfig) -> nn.LayerNorm:
    return nn.LayerNorm(c.d_model, eps=c.layer_norm_eps, bias=c.norm_bias)


class FeedForward(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.gated, self.activation = c.gated_ffn, c.activation
        self.up = nn.Linear(c.d_model, c.d_ff * (2 if c.gated_ffn else 1), bias=c.ffn_bias)
        self.down = nn.Linear(c.d_ff, c.d_model, bias=c.ffn_bias)

    def forward(self, x: Tensor) -> Tensor:
        if not self.gated:
            return self.down(activate(self.up(x), self.activation))  # (B, T, D)
        value, gate = self.up(x).chunk(2, dim=-1)  # (B, T, F) each
        return self.down(activate(value, self.activation) * gate)  # (B, T, D)
