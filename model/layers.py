"""The small pieces every block is built from, each chosen by a config axis.

Shape letters: B batch, T sequence length, D d_model, F d_ff.

    activation    gelu (exact, erf), gelu_tanh (tanh approximation), quick_gelu (x · sigmoid(1.702 x): CLIP's), relu,
                  silu, tanh, identity
    norm          the config's norm over the last axis: LayerNorm with or without its bias (ModernBERT's
                  norms have none), or RMSNorm, x / sqrt(mean(x²) + eps) · w (Llama, Qwen), or Gemma's
                  x / sqrt(mean(x²) + eps) · (1 + w), whose weights are stored as offsets from 1
    FeedForward   up -> activation -> down (BERT); gated: up projects to 2F, act(first half) * second half
                  (GeGLU, ModernBERT's Wi/Wo; SwiGLU, the decoders', NomicBERT's and GTE's gate_proj and up_proj
                  side by side); up and down each with or without a bias (GTE: down only)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import EncoderConfig
from model.lora import linear, project


def activate(x: Tensor, name: str) -> Tensor:
    if name == "gelu":
        return F.gelu(x)
    if name == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if name == "quick_gelu":
        return x * torch.sigmoid(1.702 * x)
    if name == "relu":
        return F.relu(x)
    if name == "silu":
        return F.silu(x)
    if name == "tanh":
        return torch.tanh(x)
    if name == "identity":
        return x
    raise ValueError(f"unknown activation {name!r}")


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · w over the last axis; one_plus: · (1 + w) (Gemma), its weight starting at 0."""

    def __init__(self, width: int, eps: float, one_plus: bool = False) -> None:
        super().__init__()
        self.eps, self.one_plus = eps, one_plus
        self.weight = nn.Parameter(torch.zeros(width) if one_plus else torch.ones(width))

    def forward(self, x: Tensor) -> Tensor:
        normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., width)
        return normed * (1.0 + self.weight if self.one_plus else self.weight)


def norm(c: EncoderConfig, width: int | None = None) -> nn.Module:
    """The config's norm (norm_kind) over `width` features (default d_model)."""
    width = width or c.d_model
    if c.norm_kind == "layer":
        return nn.LayerNorm(width, eps=c.layer_norm_eps, bias=c.norm_bias)
    return RMSNorm(width, c.layer_norm_eps, one_plus=c.norm_kind == "rms_one_plus")


def layer_norm(c: EncoderConfig) -> nn.LayerNorm:
    """A LayerNorm whatever norm_kind says: the heads' transforms are LayerNorms in every family that has them."""
    return nn.LayerNorm(c.d_model, eps=c.layer_norm_eps, bias=c.norm_bias)


class FeedForward(nn.Module):
    """adapted: up and down carry the config's LoRA adapters where it targets them (model/lora.py)."""

    def __init__(self, c: EncoderConfig, adapted: bool = True) -> None:
        super().__init__()
        self.gated, self.activation = c.gated_ffn, c.activation
        adapt = c if adapted else c.replace(adapters=(), adapter_rank=0, adapter_targets=())
        self.up = linear(adapt, "ffn.up", c.d_model, c.d_ff * (2 if c.gated_ffn else 1), c.ffn_bias)
        self.down = linear(adapt, "ffn.down", c.d_ff, c.d_model,
                           c.ffn_bias if c.ffn_down_bias is None else c.ffn_down_bias)

    def forward(self, x: Tensor, adapter: Tensor | None = None) -> Tensor:
        if not self.gated:
            return project(self.down, activate(project(self.up, x, adapter), self.activation), adapter)  # (B, T, D)
        value, gate = project(self.up, x, adapter).chunk(2, dim=-1)  # (B, T, F) each
        return project(self.down, activate(value, self.activation) * gate, adapter)  # (B, T, D)
