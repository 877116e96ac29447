"""The comparisons the family tests make against transformers, shared by tests/model/test_families.py and
tests/model/test_rotary_families.py (and the mask check by tests/export/test_families.py): hidden states and
attention maps on real tokens, pooled vectors, and the mask each layer's maps must show.

Shape letters: B batch, T sequence, L layers, H heads, D hidden.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer
from torch import Tensor

from model.encoder import Encoder
from tests.helpers.families import padded_batches
from tests.helpers.rotary import long_batches

TOLERANCE = 1e-5
Batch = tuple[Tensor, Tensor]  # (input_ids, attention_mask), (B, T) each


def inputs(tokenizer: Tokenizer, shape: str) -> list[Batch]:
    """The batches a shape is checked on: a few hundred tokens for "realistic", else 24 and 6 (padded_batches)."""
    return long_batches(tokenizer) if shape == "realistic" else padded_batches(tokenizer)


def real_rows(attentions: Tensor, mask: Tensor) -> Tensor:
    """The attention rows of real query tokens, whole: (N, T). Padded keys must get 0 there, in both."""
    rows = mask.bool()[:, None, None, :].expand(attentions.shape[:-1])  # (B, L, H, T)
    return attentions[rows]


def reference_body(model: torch.nn.Module, ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """transformers' last hidden state (B, T, D) and attentions (B, L, H, T, T) from the model's base."""
    out = model.base_model(input_ids=ids, attention_mask=mask, output_attentions=True)
    return out.last_hidden_state, torch.stack(out.attentions, dim=1)


def assert_body_matches(encoder: torch.nn.Module, reference: torch.nn.Module, ids: Tensor, mask: Tensor) -> Tensor:
    """Our hidden states, with maps asked for and without (local layers then attend over bands of the window,
    model/attention.py), and our maps (one per query head) equal transformers' on real tokens; returns our maps."""
    with torch.no_grad():
        ours = encoder(ids, mask, output_attentions=True)
        banded = encoder(ids, mask).token_states  # (B, T, D)
        states, attentions = reference_body(reference, ids, mask)
    real = mask.bool()
    assert ours.attentions.shape == attentions.shape  # (B, L, H, T, T)
    assert (ours.token_states[real] - states[real]).abs().max() <= TOLERANCE
    assert (banded[real] - states[real]).abs().max() <= TOLERANCE
    assert (real_rows(ours.attentions, mask) - real_rows(attentions, mask)).abs().max() <= TOLERANCE
    return ours.attentions


def first_real(states: Tensor, mask: Tensor) -> Tensor:
    """(B, T, D) -> (B, D): the first real token's state (CLS pooling, either padding side)."""
    pos = torch.arange(mask.size(1))
    return states[torch.arange(len(states)), torch.where(mask.bool(), pos, mask.size(1)).amin(1)]


def with_config(encoder: Encoder, **changes: object) -> Encoder:
    """The same weights under a config with `changes`."""
    other = Encoder(encoder.config.replace(**changes))
    other.load_state_dict(encoder.state_dict())
    return other.eval()


def assert_pooled_match(encoder: Encoder, reference: torch.nn.Module, batches: list[Batch]) -> None:
    """The loader's CLS pooling, and mean pooling of the same weights, equal the pooled reference states."""
    assert encoder.config.pooling == "cls"
    mean = with_config(encoder, pooling="mean")
    for ids, mask in batches:
        with torch.no_grad():
            states = reference(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, T, D)
            cls, averaged = encoder(ids, mask).embedding, mean(ids, mask).embedding  # (B, D) each
        expected_mean = (states * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)  # (B, D)
        assert (cls - first_real(states, mask)).abs().max() <= TOLERANCE
        assert (averaged - expected_mean).abs().max() <= TOLERANCE


def assert_masks_hold(maps: Tensor, mask: Tensor, window: int, local_layers: tuple[int, ...], causal: bool) -> None:
    """Maps (B, L, H, T, T), real queries only (a padding query may spread its weight anywhere): keys after their
    query get 0 exactly under a causal mask and are attended (> 1e-3) otherwise; keys beyond the window (|i - j| >
    window) get 0 exactly in the local layers and not in the others."""
    pos = torch.arange(mask.size(1))
    real = mask.bool()[:, None, :, None]  # (B, 1, T, 1)
    later = real & (pos[None, :] > pos[:, None])  # (B, 1, T, T): a key after its query
    far = real & ((pos[:, None] - pos[None, :]).abs() > window)  # (B, 1, T, T): beyond the window
    for layer in range(maps.size(1)):
        layer_maps = maps[:, layer]  # (B, H, T, T)
        after = layer_maps[later.expand_as(layer_maps)]
        assert bool((after == 0).all()) == causal, (layer, causal)
        assert causal or after.abs().max() > 1e-3, layer
        assert bool((layer_maps[far.expand_as(layer_maps)] == 0).all()) == (layer in local_layers), layer
