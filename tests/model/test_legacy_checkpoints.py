"""Checkpoints in the layouts older and bigger models are saved in load as transformers loads them: LayerNorm
weights named gamma / beta (old BERT and SPLADE checkpoints), as safetensors or pytorch_model.bin; sharded
safetensors with their index; a base model's keys under the `bert.` prefix and a head model's body keys without
it. Each equals transformers' own load of the same directory to max abs 1e-5, and the legacy one exports.

Shape letters: B batch, T sequence, D hidden, V vocabulary.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from bundle.session import open_session
from model.load import load_model
from model.weights import load_weights
from tests.helpers.families import model_class, padded_batches, save_hf

TOLERANCE = 1e-5


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


def test_sharded_safetensors_load_through_their_index(tmp_path: Path) -> None:
    reference = save_hf(tmp_path / "one", "bert", "ForSequenceClassification", "wide")
    reference.save_pretrained(tmp_path / "sharded", max_shard_size="40KB")
    shards = sorted(p.name for p in (tmp_path / "sharded").glob("model-*.safetensors"))
    assert len(shards) > 2 and (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    (tmp_path / "sharded" / "tokenizer.json").write_bytes((tmp_path / "one" / "tokenizer.json").read_bytes())
    compare(tmp_path / "sharded", "bert", "ForSequenceClassification")
    (tmp_path / "sharded" / shards[-1]).unlink()
    with pytest.raises(FileNotFoundError, match=shards[-1]):
        load_model(tmp_path / "sharded")


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
