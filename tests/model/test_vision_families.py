"""ViT and DINOv2 (model/families/vision.py, the vision axes of model/vision.py) against transformers: random-weight
models (tests/helpers/vision.py) loaded by model.load.load_model give transformers' last hidden states, pooled
outputs, attention maps (per head) and image-classification logits to max abs 1e-5, at a tiny and a realistic width,
each at the config's image size and at a non-square size whose positions are resampled. The axes the equality rests
on are really set (registers, SwiGLU, the antialiased resampling), checkpoints in transformers' module names load too,
a ViTModel without its pooler pools the class token, and what is not loaded is refused by name.

Shape letters: B batch, T tokens, L layers, H heads, D hidden.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from model.config import EncoderConfig
from model.families import FAMILIES
from model.load import check_config, load_model
from tests.helpers.family_checks import TOLERANCE, with_config
from tests.helpers.vision import ARCHITECTURES, LABELS, image_sizes, pixels, reference_outputs, save_vision

FAMILY = {"vit": "vit", "dinov2": "dinov2", "dinov2-swiglu": "dinov2", "dinov2-registers": "dinov2"}
BODIES = [pytest.param(arch, shape, id=f"{arch}-{shape}") for arch in ARCHITECTURES for shape in ("small", "realistic")]


def test_every_vision_family_has_a_case() -> None:
    """ViT and DINOv2 here; the towers of CLIP and SigLIP in tests/model/test_vision_towers.py."""
    vision = {family.name for family in FAMILIES if family.modality == "vision" and not family.pair}
    assert vision == set(FAMILY.values())


@pytest.mark.parametrize("arch,shape", BODIES)
def test_body_matches_transformers(tmp_path: Path, arch: str, shape: str) -> None:
    """Last hidden states, pooled output (ViT's pooler, DINOv2's normed class token) and every layer's maps, at the
    config's image size and at a resampled one."""
    reference = save_vision(tmp_path, arch, "Model", shape)
    loaded = load_model(tmp_path)
    assert loaded.kind == f"hf-{FAMILY[arch]}" and loaded.encoder.config.vision
    for height, width in image_sizes(shape):
        images = pixels(height, width)
        with torch.no_grad():
            ours = loaded.encoder(pixel_values=images, output_attentions=True)
            fast = loaded.encoder(pixel_values=images).token_states  # (B, T, D), no maps asked for
            theirs = reference_outputs(reference, images)
        maps = torch.stack(theirs.attentions, dim=1)  # (B, L, H, T, T)
        assert ours.token_states.shape == theirs.last_hidden_state.shape and ours.attentions.shape == maps.shape
        assert (ours.token_states - theirs.last_hidden_state).abs().max() <= TOLERANCE
        assert (fast - theirs.last_hidden_state).abs().max() <= TOLERANCE
        assert (ours.embedding - theirs.pooler_output).abs().max() <= TOLERANCE
        assert (ours.attentions - maps).abs().max() <= TOLERANCE


def test_a_long_image_streams_its_attention_and_matches_too(tmp_path: Path) -> None:
    """625 patches and 4 registers: past 512 positions the encoder attends by streamed_attention (model/attention.py)
    when no maps are asked for; both ways equal transformers."""
    reference = save_vision(tmp_path, "dinov2-registers", image_size=200)
    loaded = load_model(tmp_path)
    assert loaded.encoder.config.streams
    for height, width in ((200, 200), (160, 216)):
        images = pixels(height, width)
        with torch.no_grad():
            ours = loaded.encoder(pixel_values=images, output_attentions=True)
            fast = loaded.encoder(pixel_values=images).token_states  # (B, T, D), T past 512
            theirs = reference_outputs(reference, images)
        assert fast.shape[1] > 512
        assert (ours.token_states - theirs.last_hidden_state).abs().max() <= TOLERANCE
        assert (fast - theirs.last_hidden_state).abs().max() <= TOLERANCE
        assert (ours.attentions - torch.stack(theirs.attentions, dim=1)).abs().max() <= TOLERANCE


@pytest.mark.parametrize("shape", ["small", "realistic"])
def test_image_classifier_logits_match_transformers(tmp_path: Path, shape: str) -> None:
    """ViTForImageClassification: a linear classifier on the class token's final state, its labels in order."""
    reference = save_vision(tmp_path, "vit", "ForImageClassification", shape)
    loaded = load_model(tmp_path)
    assert loaded.encoder.config.labels == list(LABELS.values())
    for height, width in image_sizes(shape):
        images = pixels(height, width, seed=1)
        with torch.no_grad():
            ours, theirs = loaded.encoder(pixel_values=images).logits, reference_outputs(reference, images).logits
        assert ours.shape == theirs.shape == (2, len(LABELS))
        assert (ours - theirs).abs().max() <= TOLERANCE


def test_the_references_set_the_axes_the_families_read(tmp_path: Path) -> None:
    """Registers, SwiGLU and layer scale are in the references and in the configs read from them; the non-square
    size resamples the grid (fewer rows, more columns); without the antialiasing, DINOv2 with registers strays on it;
    the pooled vector depends on the patches' order (a mirrored image moves it well past the tolerance)."""
    registers = save_vision(tmp_path / "registers", "dinov2-registers")
    assert registers.embeddings.register_tokens.shape == (1, 4, 32)
    swiglu = save_vision(tmp_path / "swiglu", "dinov2-swiglu")
    assert hasattr(swiglu.encoder.layer[0].mlp, "weights_in") or hasattr(swiglu.encoder.layer[0].mlp, "gate_proj")
    configs = {name: load_model(tmp_path / name).encoder.config for name in ("registers", "swiglu")}
    assert (configs["registers"].register_tokens, configs["registers"].position_antialias) == (4, True)
    assert configs["swiglu"].gated_ffn and configs["swiglu"].activation == "silu"
    assert all(c.layer_scale and c.grid_size == 4 for c in configs.values())
    loaded = load_model(tmp_path / "registers")
    height, width = image_sizes("small")[1]
    images = pixels(height, width)
    plain = with_config(loaded.encoder, position_antialias=False)
    with torch.no_grad():
        expected = reference_outputs(registers, images).last_hidden_state  # (B, 1 + 4 + 3·6, D)
        assert expected.shape[1] == 1 + 4 + (height // 8) * (width // 8) and height // 8 < 4 < width // 8
        assert (plain(pixel_values=images).token_states - expected).abs().max() > 100 * TOLERANCE
        mirrored = loaded.encoder(pixel_values=images.flip(-1)).embedding  # (B, D)
        assert (mirrored - loaded.encoder(pixel_values=images).embedding).abs().max() > 100 * TOLERANCE


def test_checkpoints_in_transformers_module_names_load_too(tmp_path: Path) -> None:
    """transformers writes the released names (encoder.layer.{i}.attention.attention.query, mlp.weights_in) and reads
    its own (layers.{i}.attention.q_proj, mlp.gate_proj / up_proj): a checkpoint in those loads the same."""
    for arch in ("vit", "dinov2-swiglu", "dinov2-registers"):
        reference = save_vision(tmp_path / arch, arch)
        save_file({k: v.contiguous() for k, v in reference.state_dict().items()},
                  str(tmp_path / arch / "model.safetensors"))
        names = load_file(str(tmp_path / arch / "model.safetensors"))
        assert any(".q_proj." in name for name in names)
        images = pixels(*image_sizes("small")[1])
        with torch.no_grad():
            ours = load_model(tmp_path / arch).encoder(pixel_values=images).token_states
            assert (ours - reference_outputs(reference, images).last_hidden_state).abs().max() <= TOLERANCE


def test_a_vit_without_its_pooler_pools_the_class_token(tmp_path: Path) -> None:
    """DINO v1's ViTModel checkpoints carry no pooler: the pooled vector is the class token's final state."""
    reference = save_vision(tmp_path, "vit")
    weights = load_file(str(tmp_path / "model.safetensors"))
    save_file({k: v for k, v in weights.items() if not k.startswith("pooler.")}, str(tmp_path / "model.safetensors"))
    loaded = load_model(tmp_path)
    assert loaded.encoder.config.projection_size == 0
    images = pixels(32, 32)
    with torch.no_grad():
        states = reference_outputs(reference, images).last_hidden_state  # (B, T, D)
        assert (loaded.encoder(pixel_values=images).embedding - states[:, 0]).abs().max() <= TOLERANCE


def test_a_vision_model_reads_pixels_only(tmp_path: Path) -> None:
    """No tokenizer, no token ids; check_config (what attnserve pull asks before it downloads the weights to export
    them) asks for its preprocessor_config.json, which its bundle carries (tests/export/test_image_bundles.py)."""
    save_vision(tmp_path, "dinov2")
    loaded = load_model(tmp_path)
    with pytest.raises(ValueError, match="reads pixel values and has no tokenizer"):
        loaded.tokenizer  # noqa: B018
    with pytest.raises(ValueError, match="a vision encoder reads pixel_values alone"):
        loaded.encoder(torch.ones(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="a vision encoder reads pixel_values alone"):
        loaded.encoder(attention_mask=torch.ones(1, 5), pixel_values=pixels(32, 32))
    with pytest.raises(ValueError, match="image model without preprocessor_config.json"):
        check_config(tmp_path)


@pytest.mark.parametrize("change,message", [
    ({"architectures": ["Dinov2ForImageClassification"]}, "'Dinov2ForImageClassification' is not supported"),
    ({"image_size": [32, 48]}, r"image_size \[32, 48\] is not square"),
])
def test_what_is_not_loaded_is_refused_by_name(tmp_path: Path, change: dict[str, object], message: str) -> None:
    save_vision(tmp_path, "dinov2")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ValueError, match=message):
        check_config(tmp_path)


@pytest.mark.parametrize("fields,message", [
    (dict(image_size=32, patch_size=8), "are the vision modality's; this config reads text"),
    (dict(modality="vision", vocab_size=0, image_size=32, patch_size=8, position_embedding="grid", max_length=16),
     r"max_length 1 \+ \(image_size // patch_size\)\^2 = 17 rows"),
    (dict(modality="vision", vocab_size=0, image_size=4, patch_size=8, position_embedding="grid", max_length=1),
     "holds no patch"),
    (dict(modality="vision", image_size=32, patch_size=8, position_embedding="grid", max_length=17),
     "vision reads no token ids"),
])
def test_vision_fields_are_checked(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EncoderConfig(**{"type_vocab_size": 0, **fields})  # type: ignore[arg-type]
