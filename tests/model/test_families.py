"""Every family the loader knows, against transformers itself: each kind of check is one test over the family
table (tests/helpers/family_cases.py, one row per case of each registered family). Random-weight models
(tests/helpers/families.py, rotary.py, decoders.py) loaded by model.load.load_model give transformers' hidden
states, attention maps (per query head), pooled vectors and head logits to max abs 1e-5 on right- and left-padded
multilingual batches (a few hundred tokens at the rotary encoders' realistic shape), and their maps show each
layer's mask (causal, sliding windows, ModernBERT's local layers) as the reference's do.

Shape letters: B batch, T sequence, L layers, H heads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from model.families import FAMILIES, HEAD_KINDS, supported_classes
from model.load import load_model
from tests.helpers.families import padded_batches, save_hf
from tests.helpers.family_cases import CASES, EXPORTS, Body, Case, Masks
from tests.helpers.family_checks import (
    TOLERANCE,
    assert_body_matches,
    assert_masks_hold,
    assert_pooled_match,
    inputs,
    reference_body,
)

BODIES = [pytest.param(case, body, id=f"{case.name}-{body.id}") for case in CASES for body in case.bodies]
HEADS = [
    pytest.param(case, head, shape, id=f"{case.name}-{head}-{shape}") for case in CASES for head, shape in case.heads
]
LEFT_OUT = [pytest.param(case, head, id=f"{case.name}-{head}") for case in CASES for head in case.body_heads]
MASKS = [pytest.param(case, masks, id=f"{case.name}-{masks.body.id}") for case in CASES for masks in case.masks]


def test_every_registered_family_and_head_kind_has_a_row() -> None:
    """A family added to model/families without a row in tests/helpers/family_cases.py fails here, as does a head
    kind it loads that no row compares, or a family no bundle is exported for. The vision families and the towers of
    CLIP and SigLIP have their own cases (tests/model/test_vision_families.py, test_vision_towers.py)."""
    for family in (family for family in FAMILIES if family.modality == "text" and not family.pair):
        rows = [case for case in CASES if case.family == family.name]
        assert rows, f"family {family.name!r} has no row in tests/helpers/family_cases.py CASES"
        kinds = {HEAD_KINDS[head] for case in rows for head, _ in case.heads}
        kinds |= {HEAD_KINDS[head] for case in rows for head in case.body_heads}
        assert kinds >= set(family.heads), (family.name, set(family.heads) - kinds)
        assert any(export.family == family.name for export in EXPORTS), f"{family.name!r} has no row in EXPORTS"
    assert {case.family for case in CASES} <= {family.name for family in FAMILIES}


@pytest.mark.parametrize("case,body", BODIES)
def test_body_matches_transformers(tmp_path: Path, case: Case, body: Body) -> None:
    """States and every layer's maps on the padded batches (and a row's own inputs); the rotary encoders' CLS and
    mean pooled vectors too."""
    reference = case.save(tmp_path, case.name, "Model", body.shape, **body.extra)
    loaded = load_model(tmp_path)
    config = loaded.encoder.config
    assert loaded.kind == f"hf-{case.family}"
    if case.grouped:
        assert config.kv_heads < config.num_heads and config.head_dim != config.d_model // config.num_heads
    batches = inputs(loaded.tokenizer, body.shape)
    for ids, mask in [*batches, *case.extra_inputs(config)]:
        assert_body_matches(loaded.encoder, reference, ids, mask)
    if case.pooled:
        assert_pooled_match(loaded.encoder, reference, batches)
    assert all(bool((mask == 0).any()) for _, mask in batches[:2])  # padded, each side


@pytest.mark.parametrize("case,head,shape", HEADS)
def test_head_logits_match_transformers(tmp_path: Path, case: Case, head: str, shape: str) -> None:
    """Sequence logits (a decoder's from its last real token), token logits and masked-LM logits at real tokens."""
    reference = case.save(tmp_path, case.name, head, shape)
    loaded = load_model(tmp_path)
    for ids, mask in inputs(loaded.tokenizer, shape):
        with torch.no_grad():
            ours = loaded.encoder(ids, mask).logits
            expected = reference(input_ids=ids, attention_mask=mask).logits  # (B, C), (B, T, C) or (B, T, V)
        rows = mask.bool() if expected.dim() == 3 else slice(None)
        assert ours.shape == expected.shape
        assert (ours[rows] - expected[rows]).abs().max() <= TOLERANCE
    if head != "ForMaskedLM":
        assert loaded.encoder.config.labels == ["neg", "neutral", "pos"]


@pytest.mark.parametrize("case,head", LEFT_OUT)
def test_a_head_left_out_loads_as_the_body(tmp_path: Path, case: Case, head: str) -> None:
    """Embedders built on decoders ship as ...ForCausalLM: the body embeds, the language-model head is left out."""
    reference = case.save(tmp_path, case.name, head, "small")
    loaded = load_model(tmp_path)
    assert loaded.encoder.config.head == "none" and loaded.encoder.config.pooling == "lasttoken"
    ids, mask = padded_batches(loaded.tokenizer)[1]  # left-padded
    with torch.no_grad():
        ours = loaded.encoder(ids, mask)
        states = reference.model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert (ours.embedding - states[:, -1]).abs().max() <= TOLERANCE  # left padding: the last token is last


@pytest.mark.parametrize("case,masks", MASKS)
def test_attention_maps_show_each_layers_mask(tmp_path: Path, case: Case, masks: Masks) -> None:
    """Ours and transformers': a causal model's maps see no later key (a bidirectional one's do), and the local
    layers (ModernBERT's local_attention, the decoders' sliding windows) see no key beyond the window."""
    reference = case.save(tmp_path, case.name, "Model", masks.body.shape, **masks.body.extra)
    loaded = load_model(tmp_path)
    config = loaded.encoder.config
    assert [layer for layer in range(config.num_layers) if config.is_local(layer)] == list(masks.local_layers)
    assert config.mask_kind == ("causal" if masks.causal else "full")
    for ids, mask in padded_batches(loaded.tokenizer):
        with torch.no_grad():
            ours = loaded.encoder(ids, mask, output_attentions=True).attentions  # (B, L, H, T, T)
            _, theirs = reference_body(reference, ids, mask)
        for maps in (ours, theirs):
            assert_masks_hold(maps, mask, config.window_size, masks.local_layers, masks.causal)


def test_unknown_architecture_names_the_supported_ones(tmp_path: Path) -> None:
    save_hf(tmp_path, "bert", "Model")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "architectures": ["BertForQuestionAnswering"]}))
    with pytest.raises(ValueError, match="'BertForQuestionAnswering' is not supported; supported: BertModel, ") as err:
        load_model(tmp_path)
    assert all(name in str(err.value) for name in ("ModernBertForMaskedLM", "XLMRobertaForSequenceClassification"))
    # encoders (rotary too); decoders; Gemma3; vision; CLIP's and SigLIP's towers, and their two pairs; Alibaba's
    # NewModel and NewFor... (GTE's custom-code classes)
    assert len(supported_classes()) == 10 * 4 + 4 * 3 + 3 + 4 + 6 + 2 + 4
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
