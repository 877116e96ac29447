"""Encoder behaviour: config validation, padding invariance, pooling, shapes."""

from __future__ import annotations

import logging

import pytest
import torch

from model.config import EncoderConfig
from model.encoder import Encoder


def tiny_config(**changes: object) -> EncoderConfig:
    base = dict(vocab_size=50, d_model=32, num_heads=2, num_layers=2, d_ff=64, max_length=16, dropout=0.0,
                attention_dropout=0.0)
    base.update(changes)
    return EncoderConfig(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "changes,message",
    [
        (dict(d_model=30, num_heads=4), "divisible"),
        (dict(num_layers=0), "num_layers must be positive"),
        (dict(pooling="max"), "pooling must be one of"),
        (dict(mask_kind="window"), "window_size"),
        (dict(head="linear", num_labels=1), "num_labels >= 2"),
        (dict(head="linear", num_labels=2, label_names=("a",)), "label_names has 1"),
        (dict(dropout=1.5), "dropout must be in"),
        (dict(num_labels=3), "head is 'none'"),
    ],
)
def test_bad_config_values_raise_clear_errors(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny_config(**changes)


def test_small_heads_log_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        tiny_config(d_model=32, num_heads=4)
    assert "under 32" in caplog.text


def test_config_round_trips_through_dict() -> None:
    config = tiny_config(head="linear", num_labels=2, label_names=("neg", "pos"))
    assert EncoderConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown encoder config keys: colour"):
        EncoderConfig.from_dict({**config.to_dict(), "colour": 1})


def test_labels_are_the_label_names_or_class_numbers() -> None:
    assert tiny_config().labels == []
    assert tiny_config(head="linear", num_labels=3).labels == ["0", "1", "2"]
    assert tiny_config(head="pooler", num_labels=2, label_names=("neg", "pos")).labels == ["neg", "pos"]


@pytest.mark.parametrize("kind,window", [("full", 0), ("causal", 0), ("window", 2)])
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_padding_inside_a_batch_does_not_change_the_embedding(kind: str, window: int, pooling: str) -> None:
    torch.manual_seed(0)
    config = tiny_config(mask_kind=kind, window_size=window, pooling=pooling, head="attention", num_labels=3)
    model = Encoder(config).eval()
    short = torch.tensor([[5, 6, 7]])
    padded = torch.tensor([[5, 6, 7, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6, 7]])
    mask = torch.tensor([[1, 1, 1, 0, 0, 0, 0], [1] * 7])
    with torch.no_grad():
        alone = model(short)
        batched = model(padded, mask, output_attentions=True)
    assert torch.allclose(alone.embedding[0], batched.embedding[0], atol=1e-6)
    assert torch.allclose(alone.logits[0], batched.logits[0], atol=1e-6)
    assert batched.attentions.shape == (2, 2, 2, 7, 7)  # (B, L, H, T, T)


def test_normalised_embeddings_have_unit_length() -> None:
    model = Encoder(tiny_config(normalize=True)).eval()
    out = model(torch.tensor([[1, 2, 3], [4, 5, 6]]))
    assert torch.allclose(out.embedding.norm(dim=-1), torch.ones(2), atol=1e-6)
    assert out.logits is None and out.attentions is None


def test_pre_norm_encoder_runs_and_differs_from_post_norm() -> None:
    torch.manual_seed(0)
    post = Encoder(tiny_config()).eval()
    pre = Encoder(tiny_config(norm_position="pre")).eval()
    pre.load_state_dict(post.state_dict(), strict=False)
    ids = torch.tensor([[1, 2, 3]])
    assert not torch.allclose(post(ids).embedding, pre(ids).embedding)


def test_serving_length_defaults_to_the_position_table_and_is_bounded() -> None:
    assert tiny_config().serving_length == 16
    assert tiny_config(max_seq_length=8).serving_length == 8
    with pytest.raises(ValueError, match="max_seq_length"):
        tiny_config(max_seq_length=17)
