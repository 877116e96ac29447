"""`attnserve train --init DIR` on a decoder base (Qwen3, Gemma3; tests/helpers/decoders.py), a few steps with the
family's own classification head (`--head pooler`: transformers' bias-free `score` on the last real token): the
checkpoint's weights, mapped back through the family's table (the gated `up` split into gate_proj and up_proj
again), load into transformers' own ...ForSequenceClassification, whose logits equal ours to 1e-5; the bundle
exported from the checkpoint gives the same logits.

Shape letters: B batch, C labels.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor

from bundle.session import open_session
from model.families import family_of
from model.hf import hf_layers
from model.load import load_model
from model.training.cli import main
from tests.helpers.decoders import decoder_config, model_class, save_decoder, tokenizer_for
from tests.helpers.families import padded_batches
from tests.model.test_train import toy_pairs, write_data

TOLERANCE = 1e-5
LABELS = {0: "neg", 1: "pos"}


def transformers_weights(ours: dict[str, Tensor], hf: dict[str, object]) -> dict[str, Tensor]:
    """Our state dict under transformers' names: each table entry's tensor, a part "#k" cut out of ours."""
    family, _ = family_of(hf)
    out = {}
    table = {**family.table, **family.heads["sequence"]}
    for layer in range(hf_layers(hf)):
        for theirs, mine in table.items():
            mine, _, part = str(mine).partition("#")
            for param in ("weight", "bias"):
                tensor = ours.get(f"{mine.format(i=layer)}.{param}")
                if tensor is None:
                    continue
                if part:
                    tensor = tensor.chunk(2)[int(part)]
                name = theirs.format(i=layer)
                prefix = "" if name in family.heads["sequence"] else family.prefix  # score sits outside the body
                out[f"{prefix}{name}.{param}"] = tensor
    return out


@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])
def test_train_init_gives_the_familys_own_classifier(tmp_path: Path, arch: str) -> None:
    save_decoder(tmp_path / "base", arch, "Model", "small")
    data = write_data(tmp_path / "data.jsonl", toy_pairs(24))
    args = ["--data", str(data), "--init", str(tmp_path / "base"), "--head", "pooler", "--epochs", "2",
            "--batch-size", "8", "--max-length", "32", "--lr", "1e-3", "--no-progress", "--out", str(tmp_path / "out")]
    assert main(args) == 0
    trained = load_model(tmp_path / "out").encoder.eval()
    assert trained.config.head == "linear" and not trained.config.head_bias and trained.config.pooling == "lasttoken"
    base = load_model(tmp_path / "base").encoder.state_dict()
    assert not torch.equal(trained.state_dict()["blocks.0.ffn.up.weight"], base["blocks.0.ffn.up.weight"])  # trained
    tokenizer = tokenizer_for(arch)
    config = decoder_config(arch, "small", tokenizer.get_vocab_size(), tokenizer.token_to_id("<pad>"), LABELS)
    reference = model_class(arch, "ForSequenceClassification")(config).eval()
    hf = json.loads((tmp_path / "base" / "config.json").read_text())
    missing, unexpected = reference.load_state_dict(transformers_weights(trained.state_dict(), hf), strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    from export.bundle import export_bundle

    export_bundle(tmp_path / "out", tmp_path / "bundle", variants=("fp32",))
    session = open_session(tmp_path / "bundle" / "fast-fp32.onnx")
    for ids, mask in padded_batches(tokenizer)[::2]:
        with torch.no_grad():
            ours = trained(ids, mask).logits  # (B, C)
            diff = ours - reference(input_ids=ids, attention_mask=mask).logits
        assert diff.abs().max() <= TOLERANCE
        (logits,) = session.run(["logits"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        assert np.abs(logits - ours.numpy()).max() <= TOLERANCE
