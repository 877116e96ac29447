"""GTE as Alibaba released it (gte-multilingual-base, gte-*-v1.5): config.json in its custom code's names
(model_type new, position_embedding_type rope, rope_theta with {"type": "ntk", "factor": f}: model/families/rotary.py
new_names). Loaded, it equals transformers' Gte with the scaling as the native conversions write it, at a tiny and a
realistic shape (the realistic inputs run past the released positions' scale, where a wrong frequency shows); its
inverse frequencies equal new-impl's NTK formula written out here; without the scaling it differs; the switches only
that code implements are refused from config.json alone, before any weight is read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from model.load import check_config, load_model
from model.positions import RotaryAngles
from tests.helpers.family_checks import TOLERANCE, assert_body_matches, with_config
from tests.helpers.rotary import SHAPES, batches, save_rotary

THETA, FACTOR = 20_000.0, 8.0  # gte-multilingual-base's


def released(native: dict, **fields: object) -> dict:
    """A native Gte config.json rewritten as Alibaba's custom code writes it."""
    drop = ("rope_parameters", "model_type", "architectures")
    return {**{k: v for k, v in native.items() if k not in drop}, "model_type": "new", "architectures": ["NewModel"],
            "position_embedding_type": "rope", "rope_theta": THETA, "rope_scaling": {"type": "ntk", "factor": FACTOR},
            "pack_qkv": True, "layer_norm_type": "layer_norm", "logn_attention_scale": False,
            "logn_attention_clip1": False, "unpad_inputs": False, "use_memory_efficient_attention": False, **fields}


def save_released(directory: Path, shape: str) -> torch.nn.Module:
    """transformers' Gte with new-impl's NTK scaling in its own terms, saved, its config.json then rewritten."""
    head_size = SHAPES[shape]["hidden_size"] // SHAPES[shape]["num_attention_heads"]
    rope = {"rope_type": "linear", "rope_theta": THETA * FACTOR, "factor": FACTOR ** (2 / head_size)}
    reference = save_rotary(directory, "gte", "Model", shape, rope_parameters=rope)
    config = directory / "config.json"
    config.write_text(json.dumps(released(json.loads(config.read_text()))))
    return reference


@pytest.mark.parametrize("shape", ["tiny", "realistic"])
def test_the_released_config_loads_as_transformers_gte(tmp_path: Path, shape: str) -> None:
    reference = save_released(tmp_path, shape)
    loaded = load_model(tmp_path)
    assert loaded.encoder.config.architecture == "gte"
    for ids, mask in batches(loaded.tokenizer, shape):
        assert_body_matches(loaded.encoder, reference, ids, mask)


def test_its_frequencies_are_new_impls_ntk() -> None:
    """new-impl's static NTK: the base theta * f, every inverse frequency then divided by f ** (2 / d)."""
    d = 64
    new_impl = 1.0 / (THETA * FACTOR) ** (torch.arange(0, d, 2).double() / d) / FACTOR ** (2 / d)
    config = load_config_fields(d)
    angles = RotaryAngles(d, config["rotary_theta"], config["rotary_scaling"], config["rotary_factor"], 0)
    assert torch.allclose(angles.inv_freq.double(), new_impl, rtol=1e-6, atol=0)


def load_config_fields(head_size: int) -> dict:
    from model.families.rotary import GTE

    hf = released({"hidden_size": 2 * head_size, "num_attention_heads": 2, "num_hidden_layers": 1,
                   "intermediate_size": 8, "vocab_size": 10})
    return GTE.config(hf)


def test_without_the_scaling_it_differs(tmp_path: Path) -> None:
    reference = save_released(tmp_path, "realistic")
    loaded = load_model(tmp_path)
    unscaled = with_config(loaded.encoder, rotary_scaling="default", rotary_factor=1.0, rotary_theta=THETA)
    ids, mask = batches(loaded.tokenizer, "realistic")[0]
    with torch.no_grad():
        states = reference(input_ids=ids, attention_mask=mask).last_hidden_state
        diff = (unscaled(ids, mask).token_states - states)[mask.bool()].abs().max()
    assert diff > 10 * TOLERANCE, float(diff)


@pytest.mark.parametrize("fields,message", [
    ({"rope_scaling": {"type": "ntk", "factor": 8.0, "mixed_b": 0.5}}, "static NTK only"),
    ({"rope_scaling": {"type": "yarn", "factor": 8.0}}, "static NTK only"),
    ({"logn_attention_scale": True}, "new logn_attention_scale True is not supported"),
    ({"layer_norm_type": "rms_norm"}, "new layer_norm_type 'rms_norm' is not supported"),
    ({"pack_qkv": False}, "new pack_qkv False is not supported"),
])
def test_switches_only_its_code_implements_are_refused(tmp_path: Path, fields: dict, message: str) -> None:
    save_released(tmp_path, "tiny")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), **fields}))
    with pytest.raises(ValueError, match=message):
        check_config(tmp_path)
