"""Attention against PyTorch's references: F.scaled_dot_product_attention and nn.MultiheadAttention. The banded
form of the local layers against F.scaled_dot_product_attention under the full (T, T) window mask."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from model.attention import (
    MultiHeadSelfAttention,
    build_mask,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
    sliding_window_attention,
    window_mask,
)

SHAPES = [(1, 1, 1, 8), (2, 4, 7, 16), (3, 2, 13, 32), (4, 8, 5, 8)]


def _qkv(B: int, H: int, T: int, d: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(B * 1000 + T)
    return tuple(torch.randn(B, H, T, d, generator=g, dtype=torch.float64) for _ in range(3))


def _lengths_mask(B: int, T: int) -> torch.Tensor:
    lengths = [max(1, T - i * 2) for i in range(B)]
    return torch.tensor([[1] * n + [0] * (T - n) for n in lengths])  # (B, T)


@pytest.mark.parametrize("kind", ["full", "causal", "window"])
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_sdpa_with_masks(shape: tuple[int, int, int, int], kind: str) -> None:
    B, H, T, d = shape
    q, k, v = _qkv(B, H, T, d)
    mask = build_mask(_lengths_mask(B, T), kind, window=2)
    ours, _ = scaled_dot_product_attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    rows = mask.expand(B, H, T, T).any(-1)  # (B, H, T): queries that can see at least one key
    assert torch.allclose(ours[rows], ref[rows], atol=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
def test_weights_rows_sum_to_one_and_masked_keys_get_zero(shape: tuple[int, int, int, int]) -> None:
    B, H, T, d = shape
    q, k, v = _qkv(B, H, T, d)
    attention_mask = _lengths_mask(B, T)
    _, weights = scaled_dot_product_attention(q, k, v, build_mask(attention_mask))
    assert torch.allclose(weights.sum(-1), torch.ones(B, H, T, dtype=weights.dtype))
    hidden = ~attention_mask.bool()[:, None, None, :].expand_as(weights)
    assert (weights[hidden] == 0).all()


def test_causal_mask_hides_the_future() -> None:
    q, k, v = _qkv(1, 2, 6, 8)
    _, weights = scaled_dot_product_attention(q, k, v, causal_mask(6))
    future = ~torch.ones(6, 6, dtype=torch.bool).tril()
    assert (weights[..., future] == 0).all()
    assert (weights[..., ~future] > 0).all()


def test_window_mask_hides_far_tokens() -> None:
    q, k, v = _qkv(1, 2, 9, 8)
    _, weights = scaled_dot_product_attention(q, k, v, window_mask(9, 2))
    pos = torch.arange(9)
    far = (pos[:, None] - pos[None, :]).abs() > 2
    assert (weights[..., far] == 0).all()
    assert (weights[..., ~far] > 0).all()


def test_masks_are_finite_for_queries_that_see_nothing() -> None:
    q, k, v = _qkv(1, 1, 6, 8)
    attention_mask = torch.tensor([[1, 1, 0, 0, 0, 0]])
    out, weights = scaled_dot_product_attention(q, k, v, build_mask(attention_mask, "window", 1))
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()


def test_unknown_mask_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown mask kind"):
        build_mask(torch.ones(1, 3), "diagonal")


@pytest.mark.parametrize("B,T,D,H", [(1, 1, 8, 1), (2, 5, 32, 4), (3, 11, 64, 8), (2, 7, 48, 3)])
def test_multi_head_matches_torch_multihead_attention(B: int, T: int, D: int, H: int) -> None:
    torch.manual_seed(T)
    ours = MultiHeadSelfAttention(D, H).eval()
    ref = torch.nn.MultiheadAttention(D, H, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    x = torch.randn(B, T, D)
    attention_mask = _lengths_mask(B, T)
    out, weights = ours(x, build_mask(attention_mask))
    ref_out, ref_weights = ref(x, x, x, key_padding_mask=~attention_mask.bool(), average_attn_weights=False)
    assert torch.allclose(out, ref_out, atol=1e-5)
    assert torch.allclose(weights, ref_weights, atol=1e-5)


def test_heads_must_divide_model_width() -> None:
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadSelfAttention(30, 4)


# T shorter than, equal to, a multiple of and between multiples of the window; windows of 1 to 5 tokens
BANDED = [(1, 1, 1, 8, 2), (2, 3, 5, 8, 5), (2, 2, 6, 16, 3), (3, 2, 17, 8, 2), (2, 4, 33, 8, 1), (2, 2, 40, 32, 4)]


@pytest.mark.parametrize("padded", ["right", "left"])
@pytest.mark.parametrize("shape", BANDED)
def test_banded_local_attention_matches_sdpa_under_the_window_mask(
        shape: tuple[int, int, int, int, int], padded: str) -> None:
    B, H, T, d, window = shape
    q, k, v = _qkv(B, H, T, d)
    attention_mask = _lengths_mask(B, T)
    if padded == "left":
        attention_mask = attention_mask.flip(-1)
    ours, weights = sliding_window_attention(q, k, v, padding_mask(attention_mask), window)
    full = build_mask(attention_mask, "window", window)  # (B, 1, T, T)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=full)
    rows = full.expand(B, H, T, T).any(-1)  # (B, H, T): queries that see at least one key
    assert ours.shape == (B, H, T, d)
    assert torch.allclose(ours[rows], ref[rows], atol=1e-12)
    assert weights.shape == (B, H, -(-T // window), window, 3 * window)  # (B, H, N, W, 3W): T x 3W scores


def test_banded_weights_are_the_window_rows_of_the_full_maps() -> None:
    """Each band row holds the same weights as the full map's row, at the same keys, and nothing else."""
    B, H, T, d, window = 2, 2, 11, 8, 3
    q, k, v = _qkv(B, H, T, d)
    attention_mask = _lengths_mask(B, T)
    _, banded = sliding_window_attention(q, k, v, padding_mask(attention_mask), window)  # (B, H, N, W, 3W)
    _, full = scaled_dot_product_attention(q, k, v, build_mask(attention_mask, "window", window))  # (B, H, T, T)
    for i in range(T):
        block, row = divmod(i, window)
        for c in range(3 * window):
            j = (block - 1) * window + c  # the key position of band column c
            expected = full[:, :, i, j] if 0 <= j < T else torch.zeros(B, H, dtype=full.dtype)
            assert torch.allclose(banded[:, :, block, row, c], expected, atol=1e-12), (i, j)


def test_multi_head_local_layer_banded_equals_the_window_mask() -> None:
    torch.manual_seed(0)
    attention = MultiHeadSelfAttention(32, 4).eval()
    x, attention_mask = torch.randn(2, 23, 32), _lengths_mask(2, 23)
    banded, _ = attention(x, padding_mask(attention_mask), window=4)
    full, _ = attention(x, build_mask(attention_mask, "window", 4))
    real = attention_mask.bool()
    assert (banded[real] - full[real]).abs().max() <= 1e-6
    with pytest.raises(ValueError, match="no score bias"):
        attention(x, padding_mask(attention_mask), bias=torch.zeros(1, 4, 23, 23), window=4)
