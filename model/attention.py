"""Multi-head self-attention, written out as the tutorials teach it.

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) · V

Shape letters used in comments:
    B batch, T sequence length, D model width (d_model), H heads, d_k = D / H head width (or the model's own
    head width), H_kv key/value heads, G = H / H_kv query heads per key/value head.

Grouped-query attention (Llama, Qwen, Gemma) projects fewer key/value heads than query heads: each key/value
head is shared by G consecutive query heads (repeated before the dot product, as transformers' repeat_kv does),
so the equation, the weights and the maps stay per query head. Qwen3 and Gemma3 also normalise each head's
query and key (an RMS norm over d_k) before the rotary turn, and Gemma scales the scores by
1 / sqrt(query_pre_attn_scalar) instead of 1 / sqrt(d_k).

Positions enter here in two of the encoder's schemes (model/positions.py): MPNet's relative bias is
added to the scores, and rotary angles turn q and k before their dot product. Both are optional, so
BERT's attention is the equation alone.

Masks are boolean and broadcast to (B, H, T, T): True means "this query may look at this key".
They are applied as BERT does, additively: (1 - mask) · (the dtype's most negative finite value) is
added to the scores, so a masked key gets exactly zero weight (exp underflows to 0), and a row with
no visible key (a padding query under a window mask) stays finite instead of turning into NaN and
leaking through 0 · NaN, which -inf would do. The additive form is also the one onnxruntime's
transformer optimiser recognises and fuses into one Attention op (see docs/export.md).

Local (sliding-window) layers, where query i sees keys j with |i - j| <= w, are the same equation over a band
(sliding_window_attention): the queries in blocks of w, each block against the keys of its own block and of
its two neighbours (3w keys: every key within w of any query in the block), so scores and weights are
(T, 3w) instead of (T, T), and time and memory grow with T·w instead of T². The band mask is the window mask
cut to those 3w keys, so every query sees exactly the keys it saw before; the softmax adds the same non-zero
terms. Used where nobody asks for the (T, T) maps (the encoder's fast path); the maps come from the full form.
Extra letters: W = w block size, N = ceil(T / W) blocks.

Streamed layers (streamed_attention: the fast path's global and causal layers of the models that read long inputs,
EncoderConfig.streams) compute the same equation without ever holding the (T, T) scores. In PyTorch the queries go
in blocks of QUERY_BLOCK = C rows, each block the equation above against every key with that block's rows of the
mask ((B, H, C, T) scores: memory grows with T·C). In an exported graph they are onnxruntime's kernels
(model/kernels.py) that stream over the keys as flash attention does (one block of queries against one block of keys
at a time, carrying each row's running maximum and sum of the softmax): com.microsoft.MultiHeadAttention for
bidirectional layers, whose CPU flash path takes no mask, so the padding enters the scores through one more
dimension of q and k (q's is 1, k's 0 for a real key and a large negative number for padding: q·k + 1·that is the
additive mask), and com.microsoft.GroupQueryAttention for causal ones (the same padding dimension, a causal layer's
window, shared key/value heads read as they are). Both take the scale as an attribute (the padded width must not
change 1 / √d_k).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model import kernels
from model.lora import project
from model.positions import rotate

# builds a projection: (name inside the block, in features, out features, bias) -> the layer (model.lora.linear)
Linear = Callable[[str, int, int, bool], nn.Module]


def plain_linear(name: str, in_features: int, out_features: int, bias: bool) -> nn.Module:
    return nn.Linear(in_features, out_features, bias=bias)


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
    dropout: nn.Module | None = None, bias: Tensor | None = None, scale_dim: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Return (weights · V, weights) for q, k, v of shape (B, H, T, d_k); `bias` (1|B, H, T, T) is added to
    the scaled scores before the mask; scale_dim: the scores are divided by its square root (0: by √d_k)."""
    weights = attention_weights(q, k, mask, bias, scale_dim)  # (B, H, T, T), rows sum to 1
    if dropout is not None:
        weights = dropout(weights)
    return weights @ v, weights  # (B, H, T, d_k), (B, H, T, T)


def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None = None, bias: Tensor | None = None,
                      scale_dim: float = 0.0) -> Tensor:
    """softmax(Q Kᵀ / √d_k + bias, masked) for q, k (..., T, d_k) -> (..., T, T): the maps the equation weighs V by."""
    d_k = scale_dim or q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (B, H, T, T)
    if bias is not None:
        scores = scores + bias  # (B, H, T, T)
    if mask is not None:
        scores = scores + (1.0 - mask.to(scores.dtype)) * torch.finfo(scores.dtype).min  # (B, H, T, T)
    return F.softmax(scores, dim=-1)  # (B, H, T, T), rows sum to 1


def sliding_window_attention(
    q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor, window: int, dropout: nn.Module | None = None,
    scale_dim: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """softmax(Q Kᵀ / √d_k) · V with query i seeing keys j, |i - j| <= window, over bands: q, k, v (B, H, T, d_k),
    key_padding_mask (B, 1, 1, T) -> (weights · V (B, H, T, d_k), banded weights (B, H, N, W, 3W))."""
    T = q.size(2)
    q_blocks = to_blocks(q, window)  # (B, H, N, W, d_k)
    k_near = with_neighbours(to_blocks(k, window))  # (B, H, N, 3W, d_k)
    v_near = with_neighbours(to_blocks(v, window))  # (B, H, N, 3W, d_k)
    mask = band_mask(key_padding_mask, window)  # (B, 1, N, W, 3W)
    context, weights = scaled_dot_product_attention(
        q_blocks, k_near, v_near, mask, dropout, scale_dim=scale_dim)  # (B, H, N, W, d_k)
    return context.flatten(2, 3)[:, :, :T], weights  # (B, H, T, d_k): blocks joined, the padding cut


def to_blocks(x: Tensor, size: int) -> Tensor:
    """(B, H, T, d) -> (B, H, N, size, d): the sequence zero-padded to N·size, then cut into N blocks."""
    B, H, T, d = x.shape
    x = F.pad(x, (0, 0, 0, -T % size))  # (B, H, N·size, d)
    return x.view(B, H, -1, size, d)  # (B, H, N, size, d)


def with_neighbours(blocks: Tensor) -> Tensor:
    """(B, H, N, W, d) -> (B, H, N, 3W, d): each block after its predecessor and before its successor (zeros
    past either end)."""
    padded = F.pad(blocks, (0, 0, 0, 0, 1, 1))  # (B, H, N + 2, W, d)
    return torch.cat((padded[:, :, :-2], padded[:, :, 1:-1], padded[:, :, 2:]), dim=3)  # (B, H, N, 3W, d)


def band_mask(key_padding_mask: Tensor, window: int) -> Tensor:
    """(B, 1, 1, T) padding mask -> (B, 1, N, W, 3W): query r of a block may see key c of its 3W neighbours when
    the key is a real token and |(c - W) - r| <= window (c - W: the key's offset from the block's start)."""
    keys = key_padding_mask.to(torch.float).transpose(-2, -1)  # (B, 1, T, 1)
    keys = with_neighbours(to_blocks(keys, window)).transpose(-2, -1)  # (B, 1, N, 1, 3W); padding is 0
    query = torch.arange(window, device=keys.device)  # (W,)
    key = torch.arange(3 * window, device=keys.device) - window  # (3W,): offsets from the block's start
    near = (key[None, :] - query[:, None]).abs() <= window  # (W, 3W)
    return (keys > 0) & near  # (B, 1, N, W, 3W)


# Queries per block in PyTorch's streamed form: (B, H, QUERY_BLOCK, T) scores at a time.
QUERY_BLOCK = 512

@dataclass(frozen=True)
class Stream:
    """A streamed layer's mask, in the terms the kernels take: the (B, T) attention mask (1: a real token), whether
    query i sees only keys j <= i, and a causal layer's window (j >= i - window; 0: none)."""

    attention_mask: Tensor
    causal: bool = False
    window: int = 0


def streamed_attention(q: Tensor, k: Tensor, v: Tensor, stream: Stream, scale_dim: float = 0.0) -> Tensor:
    """softmax(Q Kᵀ / √d_k) · V under `stream`'s mask, never holding (T, T) scores (module docstring): q (B, H, T,
    d_k), k and v (B, H_kv, T, d_k) -> (B, H, T, d_k)."""
    scale = 1.0 / math.sqrt(scale_dim or q.size(-1))
    if torch.onnx.is_in_onnx_export() and stream.causal:
        return kernels.causal(q, k, v, stream.attention_mask, stream.window, scale)  # shared heads read unshared
    G = q.size(1) // k.size(1)
    k, v = share_heads(k, G), share_heads(v, G)  # (B, H, T, d_k) each
    if torch.onnx.is_in_onnx_export():
        return kernels.bidirectional(q, k, v, stream.attention_mask, scale)
    keys = torch.arange(q.size(2), device=q.device)  # (T,)
    blocks = []
    for start in range(0, q.size(2), QUERY_BLOCK):
        rows = keys[start:start + QUERY_BLOCK, None]  # (C, 1): this block's query positions
        mask = padding_mask(stream.attention_mask)  # (B, 1, 1, T)
        if stream.causal:
            mask = mask & (keys <= rows)  # (B, 1, C, T)
        if stream.window:
            mask = mask & (rows - keys <= stream.window)  # (B, 1, C, T)
        context, _ = scaled_dot_product_attention(q[:, :, start:start + QUERY_BLOCK], k, v, mask,
                                                  scale_dim=scale_dim)  # (B, H, C, d_k)
        blocks.append(context)
    return torch.cat(blocks, dim=2)  # (B, H, T, d_k)


def share_heads(x: Tensor, G: int) -> Tensor:
    """(B, H_kv, T, d_k) -> (B, H, T, d_k): each key/value head repeated for its G query heads."""
    if G == 1:
        return x
    B, H_kv, T, d_k = x.shape
    return x[:, :, None].expand(B, H_kv, G, T, d_k).reshape(B, H_kv * G, T, d_k)  # (B, H, T, d_k)


class MultiHeadSelfAttention(nn.Module):
    """Q, K, V from three projections of one input; heads split, attended, merged, then W_o. num_kv_heads below
    num_heads shares each key/value head among G query heads; qk_norm builds the per-head query and key norms;
    linear builds the four projections (model.lora.linear: with the config's adapters where it adapts them)."""

    def __init__(
        self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True, *, num_kv_heads: int = 0,
        head_dim: int = 0, scale_dim: float = 0.0, out_bias: bool | None = None,
        qk_norm: Callable[[int], nn.Module] | None = None, linear: Linear = plain_linear,
    ) -> None:
        super().__init__()
        if d_model % num_heads and not head_dim:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads or num_heads
        self.d_k, self.scale_dim = head_dim or d_model // num_heads, scale_dim
        self.q_proj = linear("attention.q_proj", d_model, num_heads * self.d_k, bias)
        self.k_proj = linear("attention.k_proj", d_model, self.num_kv_heads * self.d_k, bias)
        self.v_proj = linear("attention.v_proj", d_model, self.num_kv_heads * self.d_k, bias)
        self.out_proj = linear("attention.out_proj", num_heads * self.d_k, d_model,
                               bias if out_bias is None else out_bias)
        self.q_norm = qk_norm(self.d_k) if qk_norm is not None else None
        self.k_norm = qk_norm(self.d_k) if qk_norm is not None else None
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x: Tensor, heads: int) -> Tensor:
        B, T, _ = x.shape
        x = x.view(B, T, heads, self.d_k)  # (B, T, heads, d_k)
        return x.transpose(1, 2)  # (B, heads, T, d_k)

    def forward(
        self, x: Tensor, mask: Tensor | None = None, bias: Tensor | None = None,
        rotary: tuple[Tensor, Tensor] | None = None, window: int = 0, adapter: Tensor | None = None,
        stream: Stream | None = None, keep: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, T, D) -> (output (B, T, D), attention weights (B, H, T, T)); `bias` (1|B, H, T, T) is added to
        the scores, `rotary` (cos, sin), each (1, 1, T, d_k), turns q and k. window > 0: attend within `window`
        over bands (mask: the (B, 1, 1, T) padding mask; weights (B, H, N, W, 3W), see the module docstring).
        stream: attend by streamed_attention under its mask instead (no weights: None).
        keep (h,): head indices; in place of the weights, those heads' queries and keys as the scores read them
        (normalised, turned), stacked: (2, B, h, T, d_k), from which attention_weights gives just their maps.
        adapter (B,): each row's LoRA adapter in the projections that carry them (model.lora; None: the base)."""
        q = self.split_heads(project(self.q_proj, x, adapter), self.num_heads)  # (B, H, T, d_k)
        k = self.split_heads(project(self.k_proj, x, adapter), self.num_kv_heads)  # (B, H_kv, T, d_k)
        v = self.split_heads(project(self.v_proj, x, adapter), self.num_kv_heads)  # (B, H_kv, T, d_k)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)  # each head's vector normalised over d_k
        if rotary is not None:
            q, k = rotate(q, *rotary), rotate(k, *rotary)  # (B, H, T, d_k), (B, H_kv, T, d_k)
        G = self.num_heads // self.num_kv_heads
        kept = None if keep is None else torch.stack((  # (2, B, h, T, d_k): a query head's key head is its index // G
            q.index_select(1, keep), k.index_select(1, torch.div(keep, G, rounding_mode="floor"))))
        if stream is not None:
            context, weights = streamed_attention(q, k, v, stream, self.scale_dim), None  # (B, H, T, d_k)
        else:
            k, v = share_heads(k, G), share_heads(v, G)  # (B, H, T, d_k) each
            if window:
                if mask is None or bias is not None:
                    raise ValueError("banded attention takes a padding mask and no score bias")
                context, weights = sliding_window_attention(q, k, v, mask, window, self.dropout, self.scale_dim)
            else:
                context, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout, bias, self.scale_dim)
        return project(self.out_proj, self.merge_heads(context), adapter), weights if keep is None else kept

    def merge_heads(self, context: Tensor) -> Tensor:
        B, _, T, _ = context.shape
        context = context.transpose(1, 2).contiguous()  # (B, T, H, d_k)
        return context.view(B, T, self.num_heads * self.d_k)  # (B, T, H · d_k): heads merged back


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
    """Combine the padding mask with the structural mask `kind` -> (B, 1, T|1, T): full, causal, window (|i - j|
    <= window) or causal_window (both: a decoder's sliding window, j in [i - window, i])."""
    mask = padding_mask(attention_mask)
    T = attention_mask.size(1)
    if kind not in ("full", "causal", "window", "causal_window"):
        raise ValueError(f"unknown mask kind {kind!r}; expected full, causal, window or causal_window")
    if kind in ("causal", "causal_window"):
        mask = mask & causal_mask(T, attention_mask.device)
    if kind in ("window", "causal_window"):
        mask = mask & window_mask(T, window, attention_mask.device)
    return mask
