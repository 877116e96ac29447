"""What sits on the token states: sequence classification, token classification, masked-LM logits.

Shape letters: B batch, T sequence length, D d_model, E pooled width, C classes, V vocabulary.

Each family's head is the same few steps with its own choices (config.head_*):
    Transform   dense -> activation -> optional LayerNorm. BERT's and MPNet's pooler and RoBERTa's
                classification dense (tanh), DistilBERT's pre_classifier (relu), ModernBERT's prediction
                head (gelu + norm), every MLM transform (gelu + norm).
    sequence    linear: a classifier on the pooled embedding (the decoders' bias-free `score` on the last token);
                pooler: the first token (or, ModernBERT's classifier_pooling "mean", the mean) through a
                Transform, then a classifier; attention: one extra attention block of our own over the token
                states, mean-pooled, then a classifier.
    tokens      a classifier on every token state, after a Transform when head_transform (ModernBERT).
    mlm         a Transform, then a decoder to the vocabulary (its weight tied to the token embedding when
                the checkpoint ties it).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from model.config import EncoderConfig
from model.layers import activate, layer_norm
from model.pooling import mean_pool


class Transform(nn.Linear):
    """A (D, D) dense layer followed by an activation and, when `norm`, a LayerNorm.

    It is the Linear itself (weight and bias under the head's own name, e.g. head.pooler.weight), so
    checkpoints written before the activation and norm became choices load unchanged."""

    def __init__(self, c: EncoderConfig, norm: bool) -> None:
        super().__init__(c.d_model, c.d_model, bias=c.head_bias)
        self.activation = c.head_activation
        self.norm = layer_norm(c) if norm else None

    def forward(self, x: Tensor) -> Tensor:
        x = activate(super().forward(x), self.activation)
        return self.norm(x) if self.norm is not None else x


class ClassificationHead(nn.Module):
    """Sequence logits (B, C): linear, pooler or attention (module docstring)."""

    def __init__(self, c: EncoderConfig, block: nn.Module | None = None) -> None:
        super().__init__()
        self.kind, self.head_pooling = c.head, c.head_pooling
        if c.head == "pooler":
            self.pooler = Transform(c, c.head_norm)
        if c.head == "attention":
            self.block = block
        self.dropout = nn.Dropout(c.head_dropout)
        linear = c.head == "linear"  # the decoders' score layer has no bias (head_bias False)
        self.classifier = nn.Linear(c.embedding_size if linear else c.d_model, c.num_labels,
                                    bias=c.head_bias or not linear)

    def forward(self, token_states: Tensor, pooled: Tensor, mask: Tensor, attention_mask: Tensor) -> Tensor:
        if self.kind == "pooler":
            first = token_states[:, 0] if self.head_pooling == "cls" else mean_pool(token_states, attention_mask)
            pooled = self.pooler(first)  # (B, D)
        elif self.kind == "attention":
            states, _ = self.block(token_states, mask)  # type: ignore[misc]  # (B, T, D)
            pooled = mean_pool(states, attention_mask)
        return self.classifier(self.dropout(pooled))  # (B, C)


class TokenHead(nn.Module):
    """Token logits (B, T, C)."""

    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.transform = Transform(c, c.head_norm) if c.head_transform else None
        self.dropout = nn.Dropout(c.head_dropout)
        self.classifier = nn.Linear(c.d_model, c.num_labels)

    def forward(self, token_states: Tensor) -> Tensor:
        x = self.transform(token_states) if self.transform is not None else token_states  # (B, T, D)
        return self.classifier(self.dropout(x))  # (B, T, C)


class MaskedLMHead(nn.Module):
    """Masked-LM logits (B, T, V)."""

    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.transform = Transform(c, norm=True)
        self.decoder = nn.Linear(c.d_model, c.vocab_size)

    def forward(self, token_states: Tensor) -> Tensor:
        return self.decoder(self.transform(token_states))  # (B, T, V)


def sparse_vector(mlm_logits: Tensor, attention_mask: Tensor) -> Tensor:
    """SPLADE: (B, T, V) masked-LM logits -> (B, V), the max over real tokens of log(1 + relu(logit)).
    Every term is >= 0, so zeroing the padding's terms leaves the max over real tokens."""
    weights = torch.log(1 + torch.relu(mlm_logits))  # (B, T, V)
    return (weights * attention_mask.unsqueeze(-1).to(weights.dtype)).amax(dim=1)  # (B, V)
