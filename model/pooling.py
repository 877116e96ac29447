"""Token states -> one vector per input, as sentence-transformers' Pooling computes it, then its Dense.

Shape letters: B batch, T sequence length, D d_model, E the projection's width.

Every mode reads only real tokens (attention_mask 1), so right- and left-padded batches pool alike:
    cls           the first real token's state
    mean          the average of the real tokens' states
    max           the element-wise maximum over real tokens
    lasttoken     the last real token's state
    weightedmean  the average weighted by position, 1 for the first real token, 2 for the next, ...
    mean_sqrt_len the sum over real tokens divided by the square root of their count

The text towers of CLIP and SigLIP pool as they were trained, whatever the mask says:
    end_token     the first position holding eos_token_id (CLIP; its first position where no row holds it)
    max_id        the first position holding the row's largest id (CLIP checkpoints whose config says eos_token_id
                  2, as transformers keeps for them: their end-of-text token is the vocabulary's last)
    last_position the last position, padding or not (SigLIP: texts padded to max_length, read with no mask)
The vision towers' attention probe (SigLIP's "probe") is model/probe.py's, run by the encoder.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from model.layers import activate


def mean_pool(token_states: Tensor, attention_mask: Tensor) -> Tensor:
    """Average of the real tokens' states: (B, T, D), (B, T) -> (B, D)."""
    weights = attention_mask.to(token_states.dtype).unsqueeze(-1)  # (B, T, 1)
    total = (token_states * weights).sum(dim=1)  # (B, D)
    return total / weights.sum(dim=1).clamp(min=1e-9)


def first_real(token_states: Tensor, attention_mask: Tensor) -> Tensor:
    first = attention_mask.to(torch.int32).argmax(dim=1)  # (B,): index of the first 1
    return _gather(token_states, first)


def last_real(token_states: Tensor, attention_mask: Tensor) -> Tensor:
    T = attention_mask.size(1)
    found, from_end = attention_mask.to(torch.int32).flip(1).max(dim=1)  # (B,), (B,): the last 1, counted from the end
    from_end = torch.where(found == 0, T - 1, from_end)
    masked = token_states * attention_mask.unsqueeze(-1).to(token_states.dtype)  # (B, T, D)
    return _gather(masked, T - 1 - from_end)


def _gather(token_states: Tensor, index: Tensor) -> Tensor:
    """(B, T, D) states, (B,) index -> (B, D): each row's state at its index."""
    index = index[:, None, None].expand(-1, 1, token_states.size(-1))  # (B, 1, D)
    return token_states.gather(1, index).squeeze(1)  # (B, D)


def max_pool(token_states: Tensor, attention_mask: Tensor) -> Tensor:
    padding = attention_mask.unsqueeze(-1) == 0  # (B, T, 1)
    return token_states.masked_fill(padding, float("-inf")).max(dim=1).values  # (B, D)


def weighted_mean_pool(token_states: Tensor, attention_mask: Tensor) -> Tensor:
    T = attention_mask.size(1)
    leading = attention_mask.to(torch.int32).argmax(dim=1)  # (B,): padding before the first real token
    position = torch.arange(1, T + 1, device=token_states.device, dtype=token_states.dtype)  # (T,)
    weights = attention_mask.to(token_states.dtype) * (position[None] - leading[:, None])  # (B, T)
    total = (token_states * weights.unsqueeze(-1)).sum(dim=1)  # (B, D)
    return total / weights.sum(dim=1, keepdim=True).clamp(min=1e-9)


def mean_sqrt_len_pool(token_states: Tensor, attention_mask: Tensor) -> Tensor:
    weights = attention_mask.to(token_states.dtype).unsqueeze(-1)  # (B, T, 1)
    return (token_states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9).sqrt()  # (B, D)


def last_position(token_states: Tensor, attention_mask: Tensor) -> Tensor:
    return token_states[:, -1]  # (B, D)


def end_token(token_states: Tensor, input_ids: Tensor, eos_token_id: int) -> Tensor:
    """(B, T, D), (B, T) -> (B, D): each row's state at the first position holding eos_token_id (0 where none)."""
    found = (input_ids == eos_token_id).to(torch.int32)  # (B, T)
    return _gather(token_states, found.argmax(dim=1))  # argmax: the first maximum


def max_id(token_states: Tensor, input_ids: Tensor) -> Tensor:
    """(B, T, D), (B, T) -> (B, D): each row's state at the first position of its largest id."""
    return _gather(token_states, input_ids.to(torch.int32).argmax(dim=1))  # int32: onnx's ArgMax


POOLS = {
    "cls": first_real, "mean": mean_pool, "max": max_pool, "lasttoken": last_real,
    "weightedmean": weighted_mean_pool, "mean_sqrt_len": mean_sqrt_len_pool, "last_position": last_position,
}


def pool(mode: str, token_states: Tensor, attention_mask: Tensor, input_ids: Tensor | None = None,
         eos_token_id: int = 0) -> Tensor:
    """(B, T, D), (B, T) -> (B, D) by `mode` (module docstring); end_token and max_id read the token ids (B, T)."""
    if mode in ("end_token", "max_id"):
        if input_ids is None:
            raise ValueError(f"pooling {mode!r} reads the token ids; none were given")
        return end_token(token_states, input_ids, eos_token_id) if mode == "end_token" else \
            max_id(token_states, input_ids)
    return POOLS[mode](token_states, attention_mask)


class Projection(nn.Module):
    """sentence-transformers' Dense: activation(linear(pooled)), (B, D) -> (B, E); `then`: the Dense modules that
    follow it, each (width, activation, bias), applied in order (their weights under then.{i})."""

    def __init__(self, d_in: int, d_out: int, activation: str, bias: bool,
                 then: tuple[tuple[int, str, bool], ...] = ()) -> None:
        super().__init__()
        self.linear = nn.Linear(d_in, d_out, bias=bias)
        self.activation = activation
        widths = [d_out, *(size for size, _, _ in then)]
        self.then = nn.ModuleList(Projection(w_in, w_out, act, b)
                                  for w_in, (w_out, act, b) in zip(widths, then, strict=False))

    def forward(self, pooled: Tensor) -> Tensor:
        x = activate(self.linear(pooled), self.activation)  # (B, E)
        for dense in self.then:
            x = dense(x)  # (B, E')
        return x
