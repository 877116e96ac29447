"""The position axis: where a token's position enters the encoder, one small module per scheme.

Shape letters: B batch, T sequence length, D d_model, H heads, d_k head width.

    absolute  a learned table added to the token embeddings (BERT, DistilBERT): position ids 0..T-1.
    fairseq   the same table indexed as fairseq's make_positions does (RoBERTa, XLM-R, MPNet): real tokens
              count from pad_token_id + 1, padding sits at pad_token_id. The count runs over the attention
              mask rather than over input_ids != pad_token_id: the two agree for every input a tokenizer
              makes, and the graph then does not depend on which pad id its caller padded with.
    relative  MPNet's bias on the attention scores, T5's bidirectional buckets of the distance j - i, one
              (buckets, H) table shared by every layer.
    rotary    q and k rotated by position-dependent angles before their dot product (ModernBERT, NomicBERT,
              GTE, jina-embeddings-v3, the decoders), the "rotate half" layout; each layer kind (global, local)
              has its own theta. Scaling stretches the inverse frequencies 1 / theta^(2i / d_k) as transformers'
              rope types of the same names do (modeling_rope_utils), the cos/sin factor being 1 in all three:
                  default  none
                  linear   every frequency divided by the factor (GTE's static NTK scaling is written this way,
                           its theta already scaled)
                  dynamic  NTK-aware: once an input of T tokens passes the original length L, the base becomes
                           theta · (factor · T / L - (factor - 1))^(d_k / (d_k - 2)). T is the padded length, as
                           transformers counts it; transformers also keeps the longest T it has seen between calls
                           (until an input under L resets it), where this module reads each input's own T.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from model.config_rules import ROTARY_SCALINGS


class AbsolutePositions(nn.Embedding):
    """A learned (max_length, D) table; `fairseq_padding` shifts the ids past the padding index. It is the
    Embedding itself, so its weight keeps the name checkpoints have always used (embeddings.position.weight)."""

    def __init__(self, max_length: int, d_model: int, fairseq_padding: int | None = None) -> None:
        super().__init__(max_length, d_model)
        self.fairseq_padding = fairseq_padding

    def position_ids(self, attention_mask: Tensor) -> Tensor:
        """(B, T) mask -> (B, T) or (1, T) position ids."""
        if self.fairseq_padding is None:
            return torch.arange(attention_mask.size(1), device=attention_mask.device)[None]  # (1, T)
        real = attention_mask.long()  # (B, T)
        return torch.cumsum(real, dim=1) * real + self.fairseq_padding  # (B, T)

    def forward(self, attention_mask: Tensor) -> Tensor:
        return super().forward(self.position_ids(attention_mask))  # (B|1, T, D)


class RelativePositionBias(nn.Module):
    """MPNet's bucketed relative-position bias: a (buckets, H) table -> an additive (1, H, T, T) score bias."""

    def __init__(self, num_buckets: int, max_distance: int, num_heads: int) -> None:
        super().__init__()
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, num_heads)

    def bucket(self, relative: Tensor) -> Tensor:
        """T5's bidirectional buckets: half per direction, exact below max_exact, log-spaced up to max_distance."""
        half = self.num_buckets // 2
        direction = (relative > 0).long() * half  # keys after the query use the upper half
        distance = relative.abs()
        max_exact = half // 2
        log_ratio = torch.log(distance.clamp(min=1).float() / max_exact)  # the clamp only spares log(0)
        far = max_exact + (log_ratio / math.log(self.max_distance / max_exact) * (half - max_exact)).long()
        far = far.clamp(max=half - 1)
        return direction + torch.where(distance < max_exact, distance, far)

    def forward(self, T: int, device: torch.device) -> Tensor:
        pos = torch.arange(T, device=device)
        relative = pos[None, :] - pos[:, None]  # (T, T): key position j - query position i
        bias = self.table(self.bucket(relative))  # (T, T, H)
        return bias.permute(2, 0, 1)[None]  # (1, H, T, T)


class RotaryAngles(nn.Module):
    """cos and sin of position x inverse frequency for one theta: (T,) -> two (1, 1, T, d_k) tensors; `scaling`
    (default, linear, dynamic) stretches the frequencies by `factor` (module docstring), dynamic past
    `original_length` tokens."""

    inv_freq: Tensor
    exponents: Tensor

    def __init__(self, head_dim: int, theta: float, scaling: str = "default", factor: float = 1.0,
                 original_length: int = 0) -> None:
        super().__init__()
        if scaling not in ROTARY_SCALINGS:
            raise ValueError(f"rotary scaling {scaling!r} is not supported; supported: {', '.join(ROTARY_SCALINGS)}")
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim  # (d_k / 2,): 2i / d_k
        inv_freq = 1.0 / (theta ** exponents)  # (d_k / 2,)
        if scaling == "linear":
            inv_freq = inv_freq / factor
        self.theta, self.scaling, self.factor, self.original_length = theta, scaling, factor, original_length
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("exponents", exponents, persistent=False)

    def frequencies(self, pos: Tensor) -> Tensor:
        """(T,) positions -> (d_k / 2,) inverse frequencies; dynamic: from the input's length, computed as a tensor
        so that an exported graph computes it for each input."""
        if self.scaling != "dynamic":
            return self.inv_freq
        length = pos.max() + 1  # T, a 0-d tensor
        d = 2 * self.exponents.numel()
        growth = (self.factor * length / self.original_length - (self.factor - 1)) ** (d / (d - 2))
        grown = 1.0 / ((self.theta * growth) ** self.exponents)  # (d_k / 2,)
        return torch.where(length > self.original_length, grown, self.inv_freq)

    def forward(self, T: int, device: torch.device) -> tuple[Tensor, Tensor]:
        pos = torch.arange(T, device=device, dtype=self.inv_freq.dtype)  # float64 in a float64 copy of the model
        freqs = pos[:, None] * self.frequencies(pos)[None, :]  # (T, d_k / 2)
        angles = torch.cat((freqs, freqs), dim=-1)[None, None]  # (1, 1, T, d_k)
        return angles.cos(), angles.sin()


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding of x (B, H, T, d_k): x cos + rotate_half(x) sin, rotate_half(a, b) = (-b, a)."""
    first, second = x.chunk(2, dim=-1)  # (B, H, T, d_k / 2) each
    return x * cos + torch.cat((-second, first), dim=-1) * sin  # (B, H, T, d_k)
