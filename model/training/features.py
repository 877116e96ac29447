"""Train a head on a frozen encoder from cached features: run the encoder once, then only the head.

With the encoder frozen (and in eval mode, so no dropout) its output for a text never changes, so
the token states are computed once, batched and sorted by length, and every epoch trains the head on
them. What is cached per example is exactly what the head reads, so the saved Encoder computes the
same logits at serve time:
    linear    the pooled vector (mean or CLS, un-normalised)  -> stored as one "token" (1, D)
    pooler    the first token's state (mean pooling: the mean)  -> (1, D)
    attention all real tokens' states                          -> (T_i, D)
Shape letters: B batch, T sequence length, D d_model, C classes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from tqdm import tqdm

from model.attention import build_mask
from model.encoder import Encoder, mean_pool
from model.tokenizer import pad_batch
from model.training.data import batch_order
from model.training.loop import Split, Task


@torch.no_grad()
def extract_features(encoder: Encoder, sequences: Sequence[list[int]], pad: int, batch_size: int,
                     device: torch.device, progress: bool = True) -> list[Tensor]:
    """One cached tensor per token-id sequence, in input order (see the module docstring)."""
    encoder.eval()
    order = batch_order([len(s) for s in sequences], batch_size, False, random.Random())
    cached: dict[int, Tensor] = {}
    for indices in tqdm(order, unit="batch", desc="encoding", disable=not progress, mininterval=0.5):
        input_ids, attention_mask = pad_batch([sequences[i] for i in indices], pad)  # (B, T), (B, T)
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        states = encoder(input_ids, attention_mask).token_states  # (B, T, D)
        for row, i in enumerate(indices):
            cached[i] = _head_input(encoder, states[row], attention_mask[row]).float().cpu().clone()
    return [cached[i] for i in range(len(sequences))]


def _head_input(encoder: Encoder, states: Tensor, attention_mask: Tensor) -> Tensor:
    """(T, D) states of one padded example -> what its head reads: (1, D) or (T_i, D)."""
    kind = encoder.config.head
    if kind == "linear":
        return encoder.pooled(states[None], attention_mask[None])  # (1, E), same pooling as serving
    if kind == "pooler" and encoder.config.head_pooling == "mean":
        return mean_pool(states[None], attention_mask[None])  # (1, D): its mean over one row is itself
    if kind == "pooler":
        return states[:1]  # (1, D)
    return states[: int(attention_mask.sum())]  # (T_i, D)


class FeatureTask(Task):
    """Only encoder.head is trained, on cached features; the encoder's own weights never change."""

    def __init__(self, encoder: Encoder, train: Split, val: Split, batch_size: int,
                 device: torch.device) -> None:
        if encoder.head is None:
            raise ValueError("a feature task needs an encoder with a classification head")
        super().__init__(encoder.head, train, val, batch_size, device)
        self.config = encoder.config

    def collate(self, examples: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        states = pad_sequence(list(examples), batch_first=True)  # (B, T, D), zero-padded
        lengths = torch.tensor([len(e) for e in examples])
        attention_mask = (torch.arange(states.size(1))[None] < lengths[:, None]).long()  # (B, T)
        return states, attention_mask

    def logits(self, inputs: tuple[Tensor, Tensor]) -> Tensor:
        states, attention_mask = inputs  # (B, T, D), (B, T)
        mask = build_mask(attention_mask, self.config.mask_kind, self.config.window_size)
        pooled = mean_pool(states, attention_mask)  # (B, D): for 'linear' the cached pooled vector
        return self.module(states, pooled, mask, attention_mask)  # (B, C)
