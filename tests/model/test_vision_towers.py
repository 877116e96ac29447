"""CLIP and SigLIP (model/families/towers.py, model/towers.py) against transformers: random-weight towers and pairs
(tests/helpers/vision.py) loaded by model.load.load_model give transformers' last hidden states, pooled embeddings
(image_embeds, text_embeds, pooler_output), attention maps and the pair's logits to max abs 1e-5, at a tiny and a
realistic width, images at the config's size and at a resampled one, texts at two lengths.

Shape letters: B batch, T tokens, L layers, H heads, D hidden.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers

from model.config import EncoderConfig
from model.families import FAMILIES
from model.load import check_config, load_model
from model.towers import pair_logits
from tests.helpers.families import randomise_vectors
from tests.helpers.family_checks import TOLERANCE, real_rows
from tests.helpers.vision import POSITIONS, VOCAB, image_sizes, pair_config, pixels, save_pair, token_ids

SHAPES = ("small", "realistic")


def _lengths(pair: str, shape: str) -> list[tuple[int, tuple[int, ...]]]:
    """(padded length, real lengths): a short padded batch, then the table's full length."""
    full = POSITIONS[pair][shape]
    return [(9, (9, 5)), (full, (full, full // 2))]


def _image_reference(model: torch.nn.Module, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(last hidden state, the pooled embedding, maps (B, L, H, T, T)) of transformers' image tower."""
    out = model(pixel_values=images, output_attentions=True, interpolate_pos_encoding=True)
    pooled = out.image_embeds if hasattr(out, "image_embeds") else out.pooler_output
    return out.last_hidden_state, pooled, torch.stack(out.attentions, dim=1)


def _text_reference(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor | None) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor]:
    out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    pooled = out.text_embeds if hasattr(out, "text_embeds") else out.pooler_output
    return out.last_hidden_state, pooled, torch.stack(out.attentions, dim=1)


@pytest.mark.parametrize("pair", ["clip", "siglip"])
@pytest.mark.parametrize("shape", SHAPES)
def test_image_tower_matches_transformers(tmp_path: Path, pair: str, shape: str) -> None:
    """CLIPVisionModelWithProjection (pre-norm, quick GELU, class token through post_layernorm, the projection) and
    SiglipVisionModel (no class token, the attention probe): states, embeddings and every layer's maps."""
    reference = save_pair(tmp_path, pair, "vision", shape)
    loaded = load_model(tmp_path)
    assert loaded.kind == f"hf-{pair}-vision" and loaded.encoder.config.vision
    for height, width in image_sizes(shape):
        images = pixels(height, width)
        with torch.no_grad():
            ours = loaded.encoder(pixel_values=images, output_attentions=True)
            states, pooled, maps = _image_reference(reference, images)
        assert ours.token_states.shape == states.shape and ours.attentions.shape == maps.shape
        assert (ours.token_states - states).abs().max() <= TOLERANCE
        assert (ours.embedding - pooled).abs().max() <= TOLERANCE
        assert (ours.attentions - maps).abs().max() <= TOLERANCE


@pytest.mark.parametrize("pair", ["clip", "siglip"])
@pytest.mark.parametrize("shape", SHAPES)
def test_text_tower_matches_transformers(tmp_path: Path, pair: str, shape: str) -> None:
    """CLIPTextModelWithProjection (causal and padding mask, pooled at the end token, the projection) and
    SiglipTextModel (bidirectional, the last position, its head): real tokens' states and maps, the embeddings."""
    reference = save_pair(tmp_path, pair, "text", shape)
    loaded = load_model(tmp_path)
    assert loaded.kind == f"hf-{pair}-text"
    for length, lengths in _lengths(pair, shape):
        ids, mask = token_ids(length, lengths, end=VOCAB - 1, pad=1)
        with torch.no_grad():
            ours = loaded.encoder(ids, mask, output_attentions=True)
            fast = loaded.encoder(ids, mask).token_states  # (B, T, D): the streamed path for a causal model
            states, pooled, maps = _text_reference(reference, ids, mask)
        real = mask.bool()
        assert (ours.token_states[real] - states[real]).abs().max() <= TOLERANCE
        assert (fast[real] - states[real]).abs().max() <= TOLERANCE
        assert (ours.embedding - pooled).abs().max() <= TOLERANCE
        assert (real_rows(ours.attentions, mask) - real_rows(maps, mask)).abs().max() <= TOLERANCE


@pytest.mark.parametrize("eos,pad,pooling", [(VOCAB - 1, 1, "end_token"), (2, VOCAB - 1, "max_id")])
def test_clip_pools_at_the_end_token_by_either_rule(tmp_path: Path, eos: int, pad: int, pooling: str) -> None:
    """eos_token_id names the end token; eos_token_id 2 (the released openai configs) pools at the row's largest id,
    its first place (openai's tokenizer pads with the end token itself). Each rule picks the end token, not the last
    real token nor position 0: a text with the end token earlier moves the pooled vector with transformers'."""
    reference = save_pair(tmp_path, "clip", "text", eos_token_id=eos)
    loaded = load_model(tmp_path)
    assert loaded.encoder.config.pooling == pooling
    ids, mask = token_ids(12, (12, 7), end=VOCAB - 1, pad=pad)
    ids[0, 4] = VOCAB - 1  # an end token before the last real one: both rules pool there
    with torch.no_grad():
        ours = loaded.encoder(ids, mask)
        states, pooled, _ = _text_reference(reference, ids, mask)
    assert (ours.embedding - pooled).abs().max() <= TOLERANCE
    projected = reference.text_projection(states[:, 4])  # (B, E): row 0's state at its first end token
    assert (ours.embedding[0] - projected[0]).abs().max() <= TOLERANCE


@pytest.mark.parametrize("pair", ["clip", "siglip"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_pair_loads_as_two_towers_whose_logits_match(tmp_path: Path, pair: str, shape: str) -> None:
    """CLIPModel and SiglipModel: load_model(path, tower=...) twice from the one directory; each tower's embedding
    is transformers' get_image_features / get_text_features, and logits_per_image from them and the pair's scale
    (and SigLIP's bias), carried in both configs, equal transformers'. SigLIP's texts are padded to max_length and
    read with no mask, as it was trained."""
    reference = save_pair(tmp_path, pair, shape=shape)
    image, text = load_model(tmp_path, tower="vision"), load_model(tmp_path, tower="text")
    assert (image.encoder.config.logit_scale, text.encoder.config.logit_scale) == (pytest.approx(2.3),) * 2
    assert image.encoder.config.logit_bias == text.encoder.config.logit_bias == (
        pytest.approx(-3.0) if pair == "siglip" else None)
    assert text.encoder.config.pad_to_max_length == (pair == "siglip")
    length = POSITIONS[pair][shape]
    ids, mask = token_ids(length, (length, 6, 3), end=VOCAB - 1, pad=1)
    mask = torch.ones_like(mask) if pair == "siglip" else mask
    images = pixels(*image_sizes(shape)[0], batch=2)
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, pixel_values=images)
        image_embeds = image.encoder(pixel_values=images).embedding  # (2, E)
        text_embeds = text.encoder(ids, mask).embedding  # (3, E)
        features = reference.get_image_features(pixel_values=images).pooler_output
    assert (image_embeds - features).abs().max() <= TOLERANCE
    logits = pair_logits(image_embeds, text_embeds, image.encoder.config)  # (2, 3)
    assert logits.shape == theirs.logits_per_image.shape == (2, 3)
    assert (logits - theirs.logits_per_image).abs().max() <= TOLERANCE


@pytest.mark.parametrize("pair", ["clip", "siglip"])
def test_the_towers_set_the_axes_their_families_read(tmp_path: Path, pair: str) -> None:
    """CLIP: quick GELU, the pre-norm over the patches, the class token's own final norm, a causal text tower; SigLIP:
    no class token and a patch bias, the probe, tanh GELU, a bidirectional text tower pooled at its last position.
    The pooled image vector depends on the patches' order (a mirrored image moves it well past the tolerance)."""
    save_pair(tmp_path, pair)
    image, text = (load_model(tmp_path, tower=t).encoder for t in ("vision", "text"))
    clip = pair == "clip"
    assert image.config.activation == text.config.activation == ("quick_gelu" if clip else "gelu_tanh")
    assert (image.config.class_token, image.config.embedding_norm, image.config.pooled_norm) == (clip,) * 3
    assert image.config.patch_bias is not clip and image.config.pooling == ("cls" if clip else "probe")
    assert text.config.causal is clip and text.config.pooling == ("end_token" if clip else "last_position")
    assert image.embeddings.positions.shape == (1, int(clip) + 16, 32)
    images = pixels(32, 32)
    with torch.no_grad():
        mirrored = image(pixel_values=images.flip(-1)).embedding
        assert (mirrored - image(pixel_values=images).embedding).abs().max() > 100 * TOLERANCE


def test_a_pair_is_loaded_one_tower_at_a_time(tmp_path: Path) -> None:
    """load_model(path) refuses a pair by name; a single tower loads with its own tower named and not the other;
    check_config (attnserve pull) checks a pair tower by tower (its image tower needs the preprocessor file) and takes
    a text tower (tests/export/test_pair_bundles.py exports both); a text tower without
    tokenizer.json (SigLIP's SentencePiece model is the export's to convert) says so when asked for it."""
    save_pair(tmp_path / "pair", "siglip")
    with pytest.raises(ValueError, match="a SiglipModel checkpoint holds two towers"):
        load_model(tmp_path / "pair")
    with pytest.raises(ValueError, match="is an image model without preprocessor_config.json"):
        check_config(tmp_path / "pair")
    with pytest.raises(ValueError, match="tower 'image' is not one of vision, text"):
        load_model(tmp_path / "pair", tower="image")
    save_pair(tmp_path / "text", "clip", "text")
    assert load_model(tmp_path / "text", tower="text").encoder.config.logit_scale is None
    with pytest.raises(ValueError, match="holds no vision tower"):
        load_model(tmp_path / "text", tower="vision")
    check_config(tmp_path / "text")
    with pytest.raises(ValueError, match="has no tokenizer.json"):
        load_model(tmp_path / "pair", tower="text").tokenizer  # noqa: B018


def test_every_tower_family_has_a_case() -> None:
    towers = {family.name for family in FAMILIES if family.pair}
    assert towers == {f"{pair}-{tower}" for pair in ("clip", "siglip") for tower in ("vision", "text")}


def test_siglip2_naflex_is_refused_by_name(tmp_path: Path) -> None:
    """Siglip2Model (model_type siglip2: NaFlex, each image at its own aspect ratio) is not loaded; SigLIP 2's
    fixed-resolution checkpoints are SiglipModel (model_type siglip) and load as SigLIP."""
    save_pair(tmp_path, "siglip")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "siglip2",
                                                      "architectures": ["Siglip2Model"]}))
    with pytest.raises(ValueError, match="model_type 'siglip2' is not supported"):
        check_config(tmp_path)


@pytest.mark.parametrize("cls", ["CLIPVisionModel", "CLIPTextModel", "SiglipVisionModel"])
def test_towers_without_a_projection_pool_as_transformers(tmp_path: Path, cls: str) -> None:
    """CLIP's bare towers: their pooler_output (no projection); SigLIP's image tower without its head
    (vision_use_head false): transformers gives no pooled output, ours is the patches' mean."""
    pair = "clip" if cls.startswith("CLIP") else "siglip"
    config = pair_config(pair, "small")
    config = config.text_config if "Text" in cls else config.vision_config
    if pair == "siglip":
        config.vision_use_head = False
    with torch.random.fork_rng():
        torch.manual_seed(0)
        reference = getattr(transformers, cls)(config).eval()
        randomise_vectors(reference)
    reference.save_pretrained(tmp_path)
    encoder = load_model(tmp_path).encoder
    assert encoder.projection is None
    with torch.no_grad():
        if "Text" in cls:
            ids, mask = token_ids(9, (9, 5), end=VOCAB - 1, pad=1)
            ours, theirs = encoder(ids, mask), reference(input_ids=ids, attention_mask=mask)
        else:
            ours, theirs = encoder(pixel_values=pixels(32, 32)), reference(pixel_values=pixels(32, 32))
    expected = theirs.pooler_output if pair == "clip" else theirs.last_hidden_state.mean(dim=1)
    assert theirs.pooler_output is not None or pair == "siglip"
    assert (ours.embedding - expected).abs().max() <= TOLERANCE


@pytest.mark.parametrize("fields,message", [
    (dict(pooling="probe"), "pooling 'probe' attends over every token with no mask"),
    (dict(pooled_norm=True), "norm_position 'post' has none"),
    (dict(modality="vision", vocab_size=0, type_vocab_size=0, image_size=32, patch_size=8, position_embedding="grid",
          max_length=17, pooling="end_token"), "pooling 'end_token' reads token ids"),
    (dict(modality="vision", vocab_size=0, type_vocab_size=0, image_size=32, patch_size=8, position_embedding="grid",
          max_length=17, class_token=False), r"max_length \(image_size // patch_size\)\^2 = 16 rows"),
])
def test_tower_fields_are_checked(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EncoderConfig(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("pair", ["clip", "siglip"])
def test_a_pair_config_without_its_default_values_loads_the_same(tmp_path: Path, pair: str) -> None:
    """A pair's text_config and vision_config may lack the values equal to their class's defaults (transformers 4's
    diffing save; here the image and patch sizes, the text tower's pad id): the towers read those defaults."""
    patch = 32 if pair == "clip" else 16
    reference = save_pair(tmp_path, pair, vision=dict(image_size=224, patch_size=patch), pad_token_id=1)
    config = json.loads((tmp_path / "config.json").read_text())
    for key in ("image_size", "patch_size"):
        del config["vision_config"][key]
    del config["text_config"]["pad_token_id"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    image = load_model(tmp_path, tower="vision").encoder
    assert (image.config.image_size, image.config.patch_size) == (224, patch)
    assert load_model(tmp_path, tower="text").encoder.config.pad_token_id == 1
    images = pixels(224, 224, batch=1)
    with torch.no_grad():
        expected = reference.get_image_features(pixel_values=images).pooler_output
        assert (image(pixel_values=images).embedding - expected).abs().max() <= TOLERANCE
