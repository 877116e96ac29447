"""Checkpoints in the layouts older and bigger models are saved in load as transformers loads them: LayerNorm
weights named gamma / beta (old BERT and SPLADE checkpoints), as safetensors or pytorch_model.bin; sharded
safetensors and sharded .bin with their index (and the safetensors preferred where both are there); a base
model's keys under the `bert.` prefix and a head model's body keys without it. Each equals transformers' own load
of the same directory to max abs 1e-5, and the legacy one exports. The renaming rule is checked key by key
against transformers' own legacy renamings, and a broken index or a name clash is refused, naming what is wrong.

Shape letters: B batch, T sequence, D hidden, V vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers.conversion_mapping import get_checkpoint_conversion_mapping
from transformers.core_model_loading import apply_renamings

from bundle.session import open_session
from model.load import load_model
from model.weights import legacy_name, load_weights, weight_files
from tests.helpers.families import model_class, padded_batches, save_hf

TOLERANCE = 1e-5
# the legacy renamings of transformers that name modules none of our families has (weight norm, a multimodal
# prefix): such keys are refused by the family's table; a new legacy rule in transformers shows up here
OTHER_LEGACY = {".weight_g", ".weight_v", r"^model\.language_model\.model", r"^language_model\.model\.model"}
KEYS = ["bert.embeddings.LayerNorm.gamma", "encoder.layer.0.output.LayerNorm.beta", "LayerNorm.gamma",
        "embeddings.LayerNorm.gammas", "embeddings.LayerNorm.gamma_scale", "embeddings.norm.gamma", "layer.0.ls1.gamma",
        "x.LayerNormXgamma", "a.LayerNorm.gamma_b.LayerNorm.gamma", "a.LayerNorm.beta.b", "cls.predictions.bias"]


def legacy(directory: Path, as_bin: bool) -> None:
    """Rewrite the directory's weights with LayerNorm.weight / .bias named gamma / beta, as old checkpoints are."""
    weights = load_file(str(directory / "model.safetensors"))
    renamed = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
               for k, v in weights.items()}
    assert sum(".gamma" in k for k in renamed) >= 4
    (directory / "model.safetensors").unlink()
    if as_bin:
        torch.save(renamed, directory / "pytorch_model.bin")
    else:
        save_file(renamed, str(directory / "model.safetensors"), metadata={"format": "pt"})


def compare(directory: Path, arch: str, head: str) -> None:
    """Ours against transformers' load of the same directory, on padded batches: states, or the head's logits."""
    theirs = model_class(arch, head).from_pretrained(directory, attn_implementation="eager").eval()
    loaded = load_model(directory)
    for ids, mask in padded_batches(loaded.tokenizer)[::2]:
        with torch.no_grad():
            ours = loaded.encoder(ids, mask)
            if head == "Model":
                real = mask.bool()
                got, expected = ours.token_states[real], theirs(input_ids=ids, attention_mask=mask)[0][real]
            else:
                got, expected = ours.logits, theirs(input_ids=ids, attention_mask=mask).logits
                got, expected = (got[mask.bool()], expected[mask.bool()]) if got.dim() == 3 else (got, expected)
        assert (got - expected).abs().max() <= TOLERANCE


@pytest.mark.parametrize("as_bin", [False, True])
@pytest.mark.parametrize("head", ["Model", "ForMaskedLM"])
def test_gamma_beta_layer_norms_load_as_transformers_loads_them(tmp_path: Path, head: str, as_bin: bool) -> None:
    save_hf(tmp_path, "bert", head)
    legacy(tmp_path, as_bin)
    assert any(k.endswith("LayerNorm.gamma") for k in (torch.load(tmp_path / "pytorch_model.bin") if as_bin
                                                         else load_file(str(tmp_path / "model.safetensors"))))
    assert not any(k.endswith((".gamma", ".beta")) for k in load_weights(tmp_path))
    compare(tmp_path, "bert", head)


def test_the_renaming_is_transformers_own_rule() -> None:
    """Key by key, ours equals transformers' legacy LayerNorm renamings: only LayerNorm.gamma / .beta, the dot any
    character, not before a word character, the first match replaced."""
    legacy = get_checkpoint_conversion_mapping("legacy")
    layer_norm = [t for t in legacy if any("LayerNorm" in p for p in t._original_source_patterns)]
    assert len(layer_norm) == 2
    assert {p for t in legacy if t not in layer_norm for p in t._original_source_patterns} == OTHER_LEGACY
    assert [legacy_name(k) for k in KEYS] == [apply_renamings(k, layer_norm) for k in KEYS]
    assert legacy_name("embeddings.norm.gamma") == "embeddings.norm.gamma"  # not a LayerNorm: kept


def test_sharded_safetensors_load_through_their_index(tmp_path: Path) -> None:
    """Several shards, one a symlink out of the directory as in the Hugging Face cache (snapshot -> blob); a stale
    pytorch_model.bin of zeros beside them is ignored by transformers and by us."""
    reference = save_hf(tmp_path / "one", "bert", "ForSequenceClassification", "wide")
    reference.save_pretrained(tmp_path / "sharded", max_shard_size="40KB")
    shards = sorted(p.name for p in (tmp_path / "sharded").glob("model-*.safetensors"))
    assert len(shards) > 2 and (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    (tmp_path / "sharded" / shards[0]).rename(tmp_path / "blob")
    (tmp_path / "sharded" / shards[0]).symlink_to(tmp_path / "blob")
    (tmp_path / "sharded" / "tokenizer.json").write_bytes((tmp_path / "one" / "tokenizer.json").read_bytes())
    torch.save({k: torch.zeros_like(v) for k, v in reference.state_dict().items()},
               tmp_path / "sharded" / "pytorch_model.bin")
    compare(tmp_path / "sharded", "bert", "ForSequenceClassification")
    assert [p.name for p in weight_files(tmp_path / "sharded")] == ["model.safetensors.index.json", *shards]
    (tmp_path / "sharded" / shards[-1]).unlink()
    with pytest.raises(FileNotFoundError, match=shards[-1]):
        load_model(tmp_path / "sharded")


def test_sharded_bin_with_gamma_beta_loads_through_its_index(tmp_path: Path) -> None:
    """pytorch_model.bin.index.json over three .bin shards, LayerNorm tensors named gamma / beta."""
    save_hf(tmp_path, "bert", "ForMaskedLM")
    legacy(tmp_path, as_bin=True)
    weights = torch.load(tmp_path / "pytorch_model.bin")
    (tmp_path / "pytorch_model.bin").unlink()
    weight_map = {}
    for i in range(3):
        shard = f"pytorch_model-{i + 1:05d}-of-00003.bin"
        part = {k: v for j, (k, v) in enumerate(weights.items()) if j % 3 == i}
        torch.save(part, tmp_path / shard)
        weight_map |= dict.fromkeys(part, shard)
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    compare(tmp_path, "bert", "ForMaskedLM")


def write_index(directory: Path, weight_map: object, shards: dict[str, dict[str, torch.Tensor]]) -> None:
    directory.mkdir(exist_ok=True)
    for name, tensors in shards.items():
        save_file(tensors, str(directory / name))
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def test_broken_layouts_are_refused_naming_what_is_wrong(tmp_path: Path) -> None:
    one = {"a.weight": torch.ones(2)}
    with pytest.raises(FileNotFoundError, match="has no weights"):
        load_weights(tmp_path)
    write_index(tmp_path / "outside", {"a.weight": "../x.safetensors"}, {})
    save_file(one, str(tmp_path / "x.safetensors"))
    with pytest.raises(ValueError, match=r"'\.\./x\.safetensors'.*outside"):
        load_weights(tmp_path / "outside")
    write_index(tmp_path / "absent", {"a.weight": "s1.safetensors", "b.weight": "s1.safetensors"},
                {"s1.safetensors": one})
    with pytest.raises(ValueError, match="do not hold: b.weight"):
        load_weights(tmp_path / "absent")
    write_index(tmp_path / "twice", {"a.weight": "s1.safetensors", "b": "s2.safetensors"},
                {"s1.safetensors": one, "s2.safetensors": one})
    with pytest.raises(ValueError, match="a.weight are in more than one shard"):
        load_weights(tmp_path / "twice")
    write_index(tmp_path / "no-map", None, {})
    with pytest.raises(ValueError, match="no weight_map"):
        load_weights(tmp_path / "no-map")
    (tmp_path / "clash").mkdir()
    save_file({"x.LayerNorm.gamma": torch.ones(2), "x.LayerNorm.weight": torch.ones(2)},
              str(tmp_path / "clash" / "model.safetensors"))
    with pytest.raises(ValueError, match="'x.LayerNorm.gamma' and 'x.LayerNorm.weight' both load as"):
        load_weights(tmp_path / "clash")


def test_prefixed_and_bare_keys_load_as_transformers_loads_them(tmp_path: Path) -> None:
    """BertModel weights saved under `bert.` (as a pre-training checkpoint holds them) and a sequence classifier
    whose body keys have no `bert.`: transformers loads both, and so do we."""
    save_hf(tmp_path / "prefixed", "bert", "Model")
    weights = load_file(str(tmp_path / "prefixed" / "model.safetensors"))
    save_file({f"bert.{k}": v for k, v in weights.items()}, str(tmp_path / "prefixed" / "model.safetensors"),
              metadata={"format": "pt"})
    compare(tmp_path / "prefixed", "bert", "Model")
    save_hf(tmp_path / "bare", "bert", "ForSequenceClassification")
    weights = load_file(str(tmp_path / "bare" / "model.safetensors"))
    save_file({k.removeprefix("bert."): v for k, v in weights.items()}, str(tmp_path / "bare" / "model.safetensors"),
              metadata={"format": "pt"})
    assert not any(k.startswith("bert.") for k in load_file(str(tmp_path / "bare" / "model.safetensors")))
    compare(tmp_path / "bare", "bert", "ForSequenceClassification")


def test_a_legacy_checkpoint_exports_equal_to_transformers(tmp_path: Path) -> None:
    from export.bundle import export_bundle

    save_hf(tmp_path / "source", "bert", "Model")
    legacy(tmp_path / "source", as_bin=False)
    export_bundle(tmp_path / "source", tmp_path / "bundle", variants=("fp32",))
    theirs = transformers.BertModel.from_pretrained(tmp_path / "source", attn_implementation="eager").eval()
    ids, mask = padded_batches(load_model(tmp_path / "source").tokenizer)[0]
    (states,) = open_session(tmp_path / "bundle" / "fast-fp32.onnx").run(
        ["token_embeddings"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                               "token_type_ids": np.zeros_like(ids.numpy())})
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool().numpy()
    assert np.abs(states[real] - expected.numpy()[real]).max() <= TOLERANCE
