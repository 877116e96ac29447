"""Encoder behaviour: config validation, padding invariance, pooling, shapes, and the blocks against
torch.nn.TransformerEncoderLayer with the same weights (post-norm is also checked against BERT in
test_hf_loader.py)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from torch import nn

from model.attention import build_mask
from model.config import EncoderConfig
from model.encoder import Encoder, EncoderBlock
from tests.helpers.tiny import tiny_config as shared_tiny_config


def tiny_config(**changes: Any) -> EncoderConfig:
    """The shared tiny config (tests/helpers/tiny.py) without a classification head, with changes."""
    return shared_tiny_config(head=False).replace(**changes)


@pytest.mark.parametrize(
    "changes,message",
    [
        (dict(d_model=30, num_heads=4), "divisible"),
        (dict(num_layers=0), "num_layers must be positive"),
        (dict(pooling="median"), "pooling must be one of"),
        (dict(mask_kind="window"), "window_size"),
        (dict(head="linear", num_labels=0), "num_labels >= 1"),
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
        tiny_config(d_model=64, num_heads=2)
        tiny_config(d_model=64, num_heads=4)
    assert "(2 heads over d_model 64)" not in caplog.text  # (the shared tiny base itself has 16-wide heads)
    assert "head dimension 16 (4 heads over d_model 64) is under 32" in caplog.text
    with caplog.at_level(logging.WARNING):
        tiny_config(d_model=64, num_heads=2, head_size=8)  # a head width of its own, as decoders set it
    assert "head dimension 8 (2 heads over d_model 64) is under 32" in caplog.text


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


def reference_layer(config: EncoderConfig, block: EncoderBlock) -> nn.TransformerEncoderLayer:
    """PyTorch's own encoder layer (exact GELU, no dropout) holding `block`'s weights."""
    layer = nn.TransformerEncoderLayer(
        config.d_model, config.num_heads, dim_feedforward=config.d_ff, dropout=0.0, activation="gelu",
        layer_norm_eps=config.layer_norm_eps, batch_first=True, norm_first=config.norm_position == "pre",
    )
    attention = block.attention
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(
            torch.cat([attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight]))  # (3D, D)
        layer.self_attn.in_proj_bias.copy_(
            torch.cat([attention.q_proj.bias, attention.k_proj.bias, attention.v_proj.bias]))  # (3D,)
    layer.self_attn.out_proj.load_state_dict(attention.out_proj.state_dict())
    layer.linear1.load_state_dict(block.ffn.up.state_dict())
    layer.linear2.load_state_dict(block.ffn.down.state_dict())
    layer.norm1.load_state_dict(block.attn_norm.state_dict())
    layer.norm2.load_state_dict(block.ffn_norm.state_dict())
    return layer.eval()


def randomise_norms(module: nn.Module) -> None:
    """LayerNorms start as weight 1, bias 0; random ones make a swapped or missing norm show."""
    for norm in (m for m in module.modules() if isinstance(m, nn.LayerNorm)):
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)


def lengths_mask(lengths: list[int], T: int) -> torch.Tensor:
    return torch.tensor([[1] * n + [0] * (T - n) for n in lengths])  # (B, T)


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_encoder_block_matches_torch_transformer_encoder_layer(norm_position: str) -> None:
    config = tiny_config(norm_position=norm_position, layer_norm_eps=1e-5)
    torch.manual_seed(0)
    block = EncoderBlock(config).eval()
    randomise_norms(block)
    reference = reference_layer(config, block)
    x = torch.randn(3, 9, config.d_model)  # (B, T, D)
    attention_mask = lengths_mask([9, 5, 1], 9)
    with torch.no_grad():
        ours, _ = block(x, build_mask(attention_mask))
        theirs = reference(x, src_key_padding_mask=~attention_mask.bool())
    real = attention_mask.bool()  # padded positions' outputs are never read
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)


def test_pre_norm_encoder_matches_torch_transformer_encoder_with_final_norm() -> None:
    config = tiny_config(norm_position="pre", layer_norm_eps=1e-5, num_layers=3)
    torch.manual_seed(0)
    encoder = Encoder(config).eval()
    randomise_norms(encoder)
    reference = nn.TransformerEncoder(
        reference_layer(config, encoder.blocks[0]), config.num_layers,
        norm=nn.LayerNorm(config.d_model, eps=config.layer_norm_eps), enable_nested_tensor=False,
    ).eval()
    for block, layer in zip(encoder.blocks, reference.layers, strict=True):
        layer.load_state_dict(reference_layer(config, block).state_dict())
    reference.norm.load_state_dict(encoder.final_norm.state_dict())
    input_ids = torch.randint(1, config.vocab_size, (3, 9))
    attention_mask = lengths_mask([9, 5, 1], 9)
    with torch.no_grad():
        ours = encoder(input_ids, attention_mask).token_states  # (B, T, D)
        embedded = encoder.embeddings(input_ids, torch.zeros_like(input_ids))  # (B, T, D)
        theirs = reference(embedded, src_key_padding_mask=~attention_mask.bool())
    real = attention_mask.bool()
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)


def test_serving_length_defaults_to_the_position_table_and_is_bounded() -> None:
    assert tiny_config().serving_length == 64
    assert tiny_config(max_seq_length=8).serving_length == 8
    with pytest.raises(ValueError, match="max_seq_length"):
        tiny_config(max_seq_length=65)
