"""Every architecture the loader knows, against transformers itself: random-weight models of two shapes
(tests/helpers/families.py) loaded by model.load.load_model give transformers' hidden states, attention
maps and head logits to max abs 1e-5 on right- and left-padded multilingual batches.

Shape letters: B batch, T sequence, L layers, H heads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import Tensor

from model.families import supported_classes
from model.load import load_model
from tests.helpers.families import ARCHITECTURES, padded_batches, save_hf

TOLERANCE = 1e-5


def real_rows(attentions: Tensor, mask: Tensor) -> Tensor:
    """The attention rows of real query tokens, whole: (N, T). Padded keys must get 0 there, in both."""
    rows = mask.bool()[:, None, None, :].expand(attentions.shape[:-1])  # (B, L, H, T)
    return attentions[rows]


def reference_body(model: torch.nn.Module, ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """transformers' last hidden state (B, T, D) and attentions (B, L, H, T, T) from the model's base."""
    out = model.base_model(input_ids=ids, attention_mask=mask, output_attentions=True)
    return out.last_hidden_state, torch.stack(out.attentions, dim=1)


def assert_body_matches(encoder: torch.nn.Module, reference: torch.nn.Module, ids: Tensor, mask: Tensor) -> Tensor:
    """Our hidden states and attention maps equal transformers' on real tokens (1e-5); returns our maps."""
    with torch.no_grad():
        ours = encoder(ids, mask, output_attentions=True)
        states, attentions = reference_body(reference, ids, mask)
    real = mask.bool()
    assert (ours.token_states[real] - states[real]).abs().max() <= TOLERANCE
    assert (real_rows(ours.attentions, mask) - real_rows(attentions, mask)).abs().max() <= TOLERANCE
    return ours.attentions


@pytest.mark.parametrize("shape", ["small", "wide"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_hidden_states_and_attentions_match_transformers(tmp_path: Path, arch: str, shape: str) -> None:
    reference = save_hf(tmp_path, arch, "Model", shape)
    loaded = load_model(tmp_path)
    assert loaded.kind == f"hf-{'roberta' if arch in ('xlm-roberta', 'camembert') else arch}"
    for ids, mask in padded_batches(loaded.tokenizer):
        assert_body_matches(loaded.encoder, reference, ids, mask)


@pytest.mark.parametrize("head", ["ForSequenceClassification", "ForTokenClassification", "ForMaskedLM"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_head_logits_match_transformers(tmp_path: Path, arch: str, head: str) -> None:
    reference = save_hf(tmp_path, arch, head, "wide" if arch == "modernbert" else "small")
    loaded = load_model(tmp_path)
    for ids, mask in padded_batches(loaded.tokenizer)[::2]:
        with torch.no_grad():
            ours = loaded.encoder(ids, mask).logits
            expected = reference(input_ids=ids, attention_mask=mask).logits  # (B, C), (B, T, C) or (B, T, V)
        rows = mask.bool() if expected.dim() == 3 else slice(None)
        assert ours.shape == expected.shape
        assert (ours[rows] - expected[rows]).abs().max() <= TOLERANCE
    if head != "ForMaskedLM":
        assert loaded.encoder.config.labels == ["neg", "neutral", "pos"]


@pytest.mark.parametrize("shape", ["small", "wide"])
def test_modernbert_local_layers_are_banded_as_the_reference(tmp_path: Path, shape: str) -> None:
    """local_attention 4: a token sees two on each side in the local layers, everything in the global ones.
    small: 2 layers, a global one every 3 (0 global, 1 local); wide: 3 layers, every 2 (0, 2 global, 1 local)."""
    reference = save_hf(tmp_path, "modernbert", "Model", shape)
    loaded = load_model(tmp_path)
    ids, mask = padded_batches(loaded.tokenizer)[0]
    with torch.no_grad():
        ours = loaded.encoder(ids, mask, output_attentions=True).attentions  # (B, L, H, T, T)
        _, theirs = reference_body(reference, ids, mask)
    pos = torch.arange(ids.size(1))
    far = (pos[:, None] - pos[None, :]).abs() > 2  # (T, T)
    for layer in range(loaded.encoder.config.num_layers):
        local = loaded.encoder.config.is_local(layer)
        assert local == (layer == 1)
        # real queries only: a padding query far from every real token spreads its weight evenly
        beyond = (mask.bool()[:, :, None] & far[None])[:, None].expand_as(ours[:, layer])  # (B, H, T, T)
        for maps in (ours, theirs):
            assert bool((maps[:, layer][beyond] == 0).all()) == local, (layer, local)


@pytest.mark.parametrize("shape", ["small", "wide"])
def test_modernbert_banded_local_layers_match_transformers(tmp_path: Path, shape: str) -> None:
    """With no maps asked for, the local layers attend over bands of the window (model/attention.py); hidden
    states still equal transformers' on the padded batches and on one input filling all 64 positions."""
    reference = save_hf(tmp_path, "modernbert", "Model", shape)
    loaded = load_model(tmp_path)
    full = torch.randint(5, loaded.encoder.config.vocab_size, (1, loaded.encoder.config.max_length))
    for ids, mask in [*padded_batches(loaded.tokenizer), (full, torch.ones_like(full))]:
        with torch.no_grad():
            ours = loaded.encoder(ids, mask).token_states  # (B, T, D)
            states = reference.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
        real = mask.bool()
        assert (ours[real] - states[real]).abs().max() <= TOLERANCE


@pytest.mark.parametrize("local_attention", [10, 16])
def test_modernbert_bands_wider_than_the_input_match_transformers(tmp_path: Path, local_attention: int) -> None:
    """Windows of 5 and 8 each side: the 6-token batch is shorter than the window, the 24-token ones and a
    21-token batch (one row padded to 13) are no multiple of it; hidden states equal transformers'."""
    reference = save_hf(tmp_path, "modernbert", "Model", local_attention=local_attention)
    loaded = load_model(tmp_path)
    ragged = torch.randint(5, loaded.encoder.config.vocab_size, (2, 21))  # (B, T)
    ragged_mask = torch.ones_like(ragged)
    ragged_mask[1, 13:] = 0
    for ids, mask in [*padded_batches(loaded.tokenizer), (ragged, ragged_mask)]:
        with torch.no_grad():
            ours = loaded.encoder(ids, mask).token_states  # (B, T, D)
            states = reference.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
        real = mask.bool()
        assert (ours[real] - states[real]).abs().max() <= TOLERANCE


def test_unknown_architecture_names_the_supported_ones(tmp_path: Path) -> None:
    save_hf(tmp_path, "bert", "Model")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "architectures": ["BertForQuestionAnswering"]}))
    with pytest.raises(ValueError, match="'BertForQuestionAnswering' is not supported; supported: BertModel, ") as err:
        load_model(tmp_path)
    assert all(name in str(err.value) for name in ("ModernBertForMaskedLM", "XLMRobertaForSequenceClassification"))
    assert len(supported_classes()) == 10 * 4 + 4 * 3 + 3  # encoders (rotary too); decoders; Gemma3
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(ValueError, match="model_type 'gpt2' is not supported; supported model types: bert, roberta"):
        load_model(tmp_path)


def test_a_tensor_the_table_does_not_map_is_named(tmp_path: Path) -> None:
    save_hf(tmp_path, "distilbert", "Model")
    from safetensors.torch import load_file, save_file

    weights = load_file(str(tmp_path / "model.safetensors"))
    save_file({**weights, "transformer.layer.0.adapter.weight": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="distilbert weight table does not map: transformer.layer.0.adapter.weight"):
        load_model(tmp_path)


def test_untied_masked_lm_decoder_keeps_its_own_weights(tmp_path: Path) -> None:
    reference = save_hf(tmp_path, "bert", "ForMaskedLM", tie_word_embeddings=False)
    loaded = load_model(tmp_path)
    decoder, embedding = loaded.encoder.head.decoder.weight, loaded.encoder.embeddings.token.weight  # type: ignore[union-attr]
    assert not loaded.encoder.config.tie_decoder and decoder.data_ptr() != embedding.data_ptr()
    assert not torch.equal(decoder, embedding)
    ids, mask = padded_batches(loaded.tokenizer)[0]
    with torch.no_grad():
        diff = loaded.encoder(ids, mask).logits - reference(input_ids=ids, attention_mask=mask).logits
    assert diff[mask.bool()].abs().max() <= TOLERANCE
