"""Encoder configuration: a frozen dataclass that travels with the weights.

Every dimension a consumer needs (export, service) is read from here, never guessed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

POOLINGS = ("mean", "cls")
NORM_POSITIONS = ("post", "pre")
MASK_KINDS = ("full", "causal", "window")
HEADS = ("none", "linear", "pooler", "attention")


@dataclass(frozen=True)
class EncoderConfig:
    """Hyper-parameters of the encoder; validated on construction."""

    vocab_size: int = 30522
    d_model: int = 256
    num_heads: int = 8
    num_layers: int = 4
    d_ff: int = 1024
    max_length: int = 512  # size of the position table
    max_seq_length: int = 0  # longest input the model is meant to see (sentence-transformers' limit); 0: max_length
    dropout: float = 0.1
    attention_dropout: float = 0.1
    type_vocab_size: int = 2
    pad_token_id: int = 0
    layer_norm_eps: float = 1e-12
    norm_position: str = "post"
    mask_kind: str = "full"
    window_size: int = 0
    pooling: str = "mean"
    normalize: bool = False
    head: str = "none"
    num_labels: int = 0
    label_names: tuple[str, ...] = field(default_factory=tuple)
    head_dropout: float = 0.1

    def __post_init__(self) -> None:
        object.__setattr__(self, "label_names", tuple(self.label_names))
        for check in (_check_sizes, _check_choices, _check_mask, _check_labels):
            check(self)
        if self.head_dim < 32:
            log.warning(
                "head dimension %d (d_model %d / %d heads) is under 32; heads this small "
                "often learn poorly", self.head_dim, self.d_model, self.num_heads,
            )

    @property
    def serving_length(self) -> int:
        """Inputs are truncated to this many tokens when embedding or serving."""
        return self.max_seq_length or self.max_length

    @property
    def labels(self) -> list[str]:
        """Class names in logit order: label_names, or "0" .. "C-1" when none were given; [] without a head."""
        if self.head == "none":
            return []
        return list(self.label_names) or [str(i) for i in range(self.num_labels)]

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def replace(self, **changes: Any) -> EncoderConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["label_names"] = list(self.label_names)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EncoderConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown encoder config keys: {', '.join(unknown)}")
        return cls(**data)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> EncoderConfig:
        return cls.from_dict(json.loads(path.read_text()))


def _check_sizes(c: EncoderConfig) -> None:
    positive = ("vocab_size", "d_model", "num_heads", "num_layers", "d_ff", "max_length")
    for name in positive:
        if getattr(c, name) <= 0:
            raise ValueError(f"{name} must be positive, got {getattr(c, name)}")
    if c.d_model % c.num_heads:
        raise ValueError(
            f"d_model ({c.d_model}) must be divisible by num_heads ({c.num_heads}) "
            "so every head gets the same dimension"
        )
    for name in ("dropout", "attention_dropout", "head_dropout"):
        if not 0.0 <= getattr(c, name) < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {getattr(c, name)}")
    if not 0 <= c.max_seq_length <= c.max_length:
        raise ValueError(f"max_seq_length ({c.max_seq_length}) must be between 0 and max_length ({c.max_length})")
    if c.layer_norm_eps <= 0:
        raise ValueError(f"layer_norm_eps must be positive, got {c.layer_norm_eps}")


def _check_choices(c: EncoderConfig) -> None:
    for name, allowed in (
        ("pooling", POOLINGS), ("norm_position", NORM_POSITIONS),
        ("mask_kind", MASK_KINDS), ("head", HEADS),
    ):
        if getattr(c, name) not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {getattr(c, name)!r}")


def _check_mask(c: EncoderConfig) -> None:
    if c.mask_kind == "window" and c.window_size <= 0:
        raise ValueError("mask_kind 'window' needs a positive window_size")


def _check_labels(c: EncoderConfig) -> None:
    if c.head == "none":
        if c.num_labels:
            raise ValueError("num_labels is set but head is 'none'; choose a classification head")
        return
    if c.num_labels < 2:
        raise ValueError(f"a classification head needs num_labels >= 2, got {c.num_labels}")
    if c.label_names and len(c.label_names) != c.num_labels:
        raise ValueError(
            f"label_names has {len(c.label_names)} names but num_labels is {c.num_labels}"
        )
