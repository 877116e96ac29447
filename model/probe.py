"""Attention pooling by a learned probe (SigLIP's vision head, the pooling mode "probe"): one learned query attends
over every token state, and the attended vector goes through a pre-norm MLP with a residual.

Shape letters: B batch, T tokens, D d_model, H heads, d_k = D / H.

    a = softmax(p W_q (X W_k)ᵀ / √d_k) · X W_v · W_o     the probe p (1, D) as the only query, X (T, D) the keys
    pooled = a + MLP(LayerNorm(a))

It is the encoder's own attention equation (model/attention.py) with the query taken from the probe instead of the
tokens; the projections are a self-attention's, so their weights load as q_proj, k_proj, v_proj and out_proj
(torch's nn.MultiheadAttention, which transformers' head is, keeps q, k and v in one in_proj_weight: the family's
table splits it). The MLP is the blocks' (model/layers.py's FeedForward: d_ff, the config's activation). Every token
is real (images in a batch share one size), so no mask.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from model.attention import MultiHeadSelfAttention, scaled_dot_product_attention
from model.config import EncoderConfig
from model.layers import FeedForward, norm


class AttentionPool(nn.Module):
    """Token states (B, T, D) -> one pooled vector (B, D) (module docstring)."""

    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.probe = nn.Parameter(torch.randn(1, 1, c.d_model))
        self.attention = MultiHeadSelfAttention(c.d_model, c.num_heads)
        self.norm = norm(c)
        self.ffn = FeedForward(c, adapted=False)

    def forward(self, token_states: Tensor) -> Tensor:
        attn = self.attention
        probe = self.probe.expand(token_states.size(0), -1, -1)  # (B, 1, D)
        q = attn.split_heads(attn.q_proj(probe), attn.num_heads)  # (B, H, 1, d_k)
        k = attn.split_heads(attn.k_proj(token_states), attn.num_heads)  # (B, H, T, d_k)
        v = attn.split_heads(attn.v_proj(token_states), attn.num_heads)  # (B, H, T, d_k)
        context, _ = scaled_dot_product_attention(q, k, v)  # (B, H, 1, d_k)
        attended = attn.out_proj(attn.merge_heads(context))  # (B, 1, D)
        return (attended + self.ffn(self.norm(attended)))[:, 0]  # (B, D)
