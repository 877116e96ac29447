"""The decoders used as encoders, against transformers itself: random-weight Llama, Mistral, Qwen2, Qwen3,
Gemma3 and EmbeddingGemma-style (bidirectional Gemma3) models of two shapes (tests/helpers/decoders.py) loaded
by model.load.load_model give transformers' hidden states, attention maps (per query head) and last-token
sequence logits to max abs 1e-5 on right- and left-padded multilingual batches.

Shape letters: B batch, T sequence, L layers, H query heads.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from model.load import load_model
from tests.helpers.decoders import DECODERS, save_decoder
from tests.helpers.families import padded_batches
from tests.model.test_families import assert_body_matches, real_rows, reference_body

TOLERANCE = 1e-5


@pytest.mark.parametrize("shape", ["small", "wide"])
@pytest.mark.parametrize("arch", DECODERS)
def test_hidden_states_and_attentions_match_transformers(tmp_path: Path, arch: str, shape: str) -> None:
    reference = save_decoder(tmp_path, arch, "Model", shape)
    loaded = load_model(tmp_path)
    config = loaded.encoder.config
    assert config.kv_heads < config.num_heads and config.head_dim != config.d_model // config.num_heads
    for ids, mask in padded_batches(loaded.tokenizer):
        with torch.no_grad():
            ours = loaded.encoder(ids, mask, output_attentions=True)
            banded = loaded.encoder(ids, mask).token_states  # no maps asked for: local layers over bands
            states, attentions = reference_body(reference, ids, mask)
        real = mask.bool()
        assert ours.attentions.shape == attentions.shape  # (B, L, H, T, T): one map per query head
        assert (ours.token_states[real] - states[real]).abs().max() <= TOLERANCE
        assert (banded[real] - states[real]).abs().max() <= TOLERANCE
        assert (real_rows(ours.attentions, mask) - real_rows(attentions, mask)).abs().max() <= TOLERANCE


@pytest.mark.parametrize("arch", ["qwen3", "gemma3", "embeddinggemma"])
def test_causal_maps_are_lower_triangular_and_windows_hold(tmp_path: Path, arch: str) -> None:
    """Causal models see no later key; the sliding layers see no key beyond their window, and EmbeddingGemma's
    bidirectional layers see later keys."""
    save_decoder(tmp_path, arch, "Model", "wide")
    loaded = load_model(tmp_path)
    config = loaded.encoder.config
    ids, mask = padded_batches(loaded.tokenizer)[0]
    with torch.no_grad():
        maps = loaded.encoder(ids, mask, output_attentions=True).attentions  # (B, L, H, T, T)
    pos = torch.arange(ids.size(1))
    real = mask.bool()[:, None, :, None]  # (B, 1, T, 1): real queries only (a padding query sees no key)
    later = real & (pos[None, :] > pos[:, None])  # (B, 1, T, T): a key after its query
    far = real & ((pos[:, None] - pos[None, :]).abs() > config.window_size)  # beyond the window
    for layer in range(config.num_layers):
        layer_maps = maps[:, layer]  # (B, H, T, T)
        assert bool((layer_maps[later.expand_as(layer_maps)] == 0).all()) == (arch != "embeddinggemma")
        assert bool((layer_maps[far.expand_as(layer_maps)] == 0).all()) == config.is_local(layer)


@pytest.mark.parametrize("arch", DECODERS)
def test_sequence_classifier_scores_the_last_token_as_transformers(tmp_path: Path, arch: str) -> None:
    reference = save_decoder(tmp_path, arch, "ForSequenceClassification", "wide")
    loaded = load_model(tmp_path)
    assert loaded.encoder.config.labels == ["neg", "neutral", "pos"]
    for ids, mask in padded_batches(loaded.tokenizer):
        with torch.no_grad():
            ours = loaded.encoder(ids, mask).logits
            expected = reference(input_ids=ids, attention_mask=mask).logits  # (B, C)
        assert (ours - expected).abs().max() <= TOLERANCE


@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])
def test_a_causal_lm_loads_as_its_body(tmp_path: Path, arch: str) -> None:
    """Embedders built on decoders ship as ...ForCausalLM: the body embeds, the language-model head is left out."""
    reference = save_decoder(tmp_path, arch, "ForCausalLM", "small")
    loaded = load_model(tmp_path)
    assert loaded.encoder.config.head == "none" and loaded.encoder.config.pooling == "lasttoken"
    ids, mask = padded_batches(loaded.tokenizer)[1]  # left-padded
    with torch.no_grad():
        ours = loaded.encoder(ids, mask)
        states = reference.model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert (ours.embedding - states[:, -1]).abs().max() <= TOLERANCE  # left padding: the last token is last


@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])
def test_is_causal_false_makes_a_decoder_bidirectional_as_transformers(tmp_path: Path, arch: str) -> None:
    """transformers' switch for bidirectional decoder embedders, is_causal false in config.json: every layer sees
    later tokens, a sliding layer W each side; hidden states and maps equal transformers'."""
    reference = save_decoder(tmp_path, arch, "Model", "wide", is_causal=False)
    loaded = load_model(tmp_path)
    assert loaded.encoder.config.mask_kind == "full"
    for ids, mask in padded_batches(loaded.tokenizer):
        maps = assert_body_matches(loaded.encoder, reference, ids, mask)
        later = torch.ones(ids.size(1), ids.size(1)).triu(1).bool()  # (T, T): keys after their query
        assert maps[..., later].abs().max() > 1e-3  # later keys are attended
