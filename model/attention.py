"""Multi-head self-attention, written out as the tutorials teach it.

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) · V

Shape letters used in comments:
    B batch, T sequence length, D model width (d_model), H heads, d_k = D / H head width.

Positions enter here in two of the encoder's schemes (model/positions.py): MPNet's relative bias is
added to the scores, and rotary angles turn q and k before their dot product. Both are optional, so
BERT's attention is the equation alone.

Masks are boolean and broadcast to (B, H, T, T): True means "this query may look at this key".
They are applied as BERT does, additively: (1 - mask) · (the dtype's most negative finite value) is
added to the scores, so a masked key gets exactly zero weight (exp underflows to 0), and a row with
no visible key (a padding query under a window mask) stays finite instead of turning into NaN and
leaking through 0 · NaN, which -inf would do. The additive form is also the one onnxruntime's
transformer optimiser recognises and fuses into one Attention op (see docs/export.md).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.positions import rotate


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
    dropout: nn.Module | None = None, bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Return (weights · V, weights) for q, k, v of shape (B, H, T, d_k); `bias` (1|B, H, T, T) is added to
    the scaled scores before the mask."""
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (B, H, T, T)
    if bias is not None:
        scores = scores + bias  # (B, H, T, T)
    if mask is not None:
        scores = scores + (1.0 - mask.to(scores.dtype)) * torch.finfo(scores.dtype).min  # (B, H, T, T)
    weights = F.softmax(scores, dim=-1)  # (B, H, T, T), rows sum to 1
    if dropout is not None:
        weights = dropout(weights)
    return weights @ v, weights  # (B, H, T, d_k), (B, H, T, T)


class MultiHeadSelfAttention(nn.Module):
    """Q, K, V from three projections of one input; heads split, attended, merged, then W_o."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        x = x.view(B, T, self.num_heads, self.d_k)  # (B, T, H, d_k)
        return x.transpose(1, 2)  # (B, H, T, d_k)

    def forward(
        self, x: Tensor, mask: Tensor | None = None, bias: Tensor | None = None,
        rotary: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """x (B, T, D) -> (output (B, T, D), attention weights (B, H, T, T)); `bias` (1|B, H, T, T) is added to
        the scores, `rotary` (cos, sin), each (1, 1, T, d_k), turns q and k."""
        B, T, D = x.shape
        q = self.split_heads(self.q_proj(x))  # (B, H, T, d_k)
        k = self.split_heads(self.k_proj(x))  # (B, H, T, d_k)
        v = self.split_heads(self.v_proj(x))  # (B, H, T, d_k)
        if rotary is not None:
            q, k = rotate(q, *rotary), rotate(k, *rotary)  # (B, H, T, d_k) each
        context, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout, bias)
        context = context.transpose(1, 2).contiguous()  # (B, T, H, d_k)
        context = context.view(B, T, D)  # (B, T, D): heads merged back
        return self.out_proj(context), weights


def padding_mask(attention_mask: Tensor) -> Tensor:
    """(B, T) with 1 for real tokens -> (B, 1, 1, T): every query may see the real keys."""
    return attention_mask.bool().unsqueeze(1).unsqueeze(2)  # (B, 1, 1, T)


def causal_mask(T: int, device: torch.device | None = None) -> Tensor:
    """(1, 1, T, T): query i sees keys j <= i."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()[None, None]


def window_mask(T: int, window: int, device: torch.device | None = None) -> Tensor:
    """(1, 1, T, T): query i sees keys j with |i - j| <= window."""
    pos = torch.arange(T, device=device)
    distance = (pos[:, None] - pos[None, :]).abs()  # (T, T)
    return (distance <= window)[None, None]


def build_mask(attention_mask: Tensor, kind: str = "full", window: int = 0) -> Tensor:
    """Combine the padding mask with the configured structural mask -> (B, 1, T|1, T)."""
    mask = padding_mask(attention_mask)
    T = attention_mask.size(1)
    if kind == "causal":
        mask = mask & causal_mask(T, attention_mask.device)
    elif kind == "window":
        mask = mask & window_mask(T, window, attention_mask.device)
    elif kind != "full":
        raise ValueError(f"unknown mask kind {kind!r}; expected full, causal or window")
    return mask
