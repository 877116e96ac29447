"""The onnxruntime kernels a streamed layer (model/attention.py, streamed_attention) exports to: called only while
torch.onnx exports a graph, where each becomes one com.microsoft node that streams over the keys as flash attention
does, holding no (T, T) scores.

    bidirectional  com.microsoft.MultiHeadAttention: its CPU flash path takes no mask, so the padding enters the
                   scores through one more dimension of q and k (with_key_scores)
    causal         com.microsoft.GroupQueryAttention: the same padding dimension, a causal layer's window, key/value
                   heads read unshared; its key and value cache outputs, unused, are released at once (released)

Both take the scale as an attribute, so the padded width does not change 1 / √d_k. Why these two, measured against
the other candidates: docs/performance.md ("Why these kernels"). Shape letters as in model/attention.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# The score a padding key gets in the exported bidirectional kernel (float16's lowest finite value, so the graph's
# float16 variant holds it too): exp of it, times the scale, against any real score underflows to exactly zero.
PADDING_SCORE = -65504.0


def bidirectional(q: Tensor, k: Tensor, v: Tensor, attention_mask: Tensor, scale: float) -> Tensor:
    """com.microsoft.MultiHeadAttention over (B, T, H · width) inputs, the padding as q and k's extra dimension:
    q, k, v (B, H, T, d_k) (key/value heads shared) -> (B, H, T, d_k)."""
    B, H, T, d_k = q.shape
    q, k = with_key_scores(q, k, attention_mask, d_k + 1)  # (B, H, T, d_k + 1) each
    context = torch.onnx.ops.symbolic(
        "com.microsoft::MultiHeadAttention", [_tokens_first(q), _tokens_first(k), _tokens_first(v)],
        {"num_heads": H, "scale": scale}, dtype=q.dtype, shape=(B, T, H * d_k), version=1)  # (B, T, H · d_k)
    return context.view(B, T, H, d_k).transpose(1, 2)  # (B, H, T, d_k)


def causal(q: Tensor, k: Tensor, v: Tensor, attention_mask: Tensor, window: int, scale: float) -> Tensor:
    """com.microsoft.GroupQueryAttention over (B, T, heads · width) inputs, the padding as q and k's extra dimension
    (so any padding, left or right: every row is given as T long), the window as the keys a query sees, itself
    included (window + 1; -1: none), the key/value heads unshared. The kernel takes one head width for q, k and v, a
    multiple of 8: all three are zero-padded to it, which changes no q·k, and v's padded columns are cut.
    q (B, H, T, d_k), k and v (B, H_kv, T, d_k) -> (B, H, T, d_k)."""
    B, H, T, d_k = q.shape
    H_kv = k.size(1)
    width = d_k + 1 + (-(d_k + 1) % 8)
    q, k = with_key_scores(q, k, attention_mask, width)  # (B, H, T, width), (B, H_kv, T, width)
    v = F.pad(v, (0, width - d_k))  # (B, H_kv, T, width)
    last = attention_mask.new_full((B,), T - 1, dtype=torch.int32)  # (B,): each row's last position
    total = attention_mask.new_full((), T, dtype=torch.int32)  # (): the sequence length
    context, key_cache, value_cache = torch.onnx.ops.symbolic_multi_out(
        "com.microsoft::GroupQueryAttention", [_tokens_first(q), _tokens_first(k), _tokens_first(v), None, None, last,
                                               total],
        {"num_heads": H, "kv_num_heads": H_kv, "scale": scale, "local_window_size": window + 1 if window
         else -1}, dtypes=[q.dtype] * 3, shapes=[(B, T, H * width), (B, H_kv, T, width), (B, H_kv, T, width)],
        version=1)  # (B, T, H · width); the cache outputs, (B, H_kv, T, width) each, unused
    context = context + released(key_cache) + released(value_cache)  # adds zeros
    return context.view(B, T, H, width).transpose(1, 2)[..., :d_k]  # (B, H, T, d_k)


def released(unused: Tensor) -> Tensor:
    """0, read from an output the graph does not use, so that onnxruntime frees it now: it frees a node output
    nothing reads only when the run ends, so every causal layer's key and value caches would stay resident through
    the whole graph (without its cache outputs the kernel leaves its streaming path). An empty slice reads it."""
    return unused[..., :0].sum()


def with_key_scores(q: Tensor, k: Tensor, attention_mask: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """q (B, H, T, d_k), k (B, heads, T, d_k) -> each (..., width): one more dimension, q's 1 and k's the padding
    score (0 for a real key, PADDING_SCORE for padding), so q·k gains the additive mask; then zeros up to width."""
    key_score = (1.0 - attention_mask.to(q.dtype)) * PADDING_SCORE  # (B, T): 0 for a real key
    q = torch.cat((q, torch.ones_like(q[..., :1])), dim=-1)  # (B, H, T, d_k + 1)
    k = torch.cat((k, key_score[:, None, :, None].expand(*k.shape[:3], 1)), dim=-1)  # (B, heads, T, d_k + 1)
    return F.pad(q, (0, width - q.size(-1))), F.pad(k, (0, width - k.size(-1)))


def _tokens_first(x: Tensor) -> Tensor:
    """(B, heads, T, width) -> (B, T, heads · width), the layout onnxruntime's attention kernels read."""
    B, heads, T, width = x.shape
    return x.transpose(1, 2).reshape(B, T, heads * width)
