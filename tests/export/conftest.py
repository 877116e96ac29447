"""Session-scoped models and bundles for the export tests (reusable by other test packages).

    tiny_checkpoint   attnserve checkpoint from tests.helpers.tiny (linear head, labels neg/pos)
    tiny_bundle       its fp32 bundle (fast + attention graphs)
    tiny_hf_dir       a transformers BertForSequenceClassification saved with save_pretrained
    tiny_hf_bundle    its fp32 bundle
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from export.bundle import export_bundle
from model.tokenizer import train_wordpiece
from tests.helpers.tiny import SENTENCES, make_tiny_checkpoint


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny")


@pytest.fixture(scope="session")
def tiny_bundle(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundles") / "tiny"
    export_bundle(tiny_checkpoint, out, name="tiny", version="7")
    return out


def make_tiny_hf_bert(directory: Path) -> Path:
    """A seeded 2-layer BertForSequenceClassification plus a tokenizer.json, HF directory layout."""
    from transformers import BertConfig, BertForSequenceClassification

    tokenizer = train_wordpiece(SENTENCES, vocab_size=200, min_frequency=1)
    config = BertConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, id2label={0: "neg", 1: "pos"},
        label2id={"neg": 0, "pos": 1},
    )
    with torch.random.fork_rng():
        torch.manual_seed(1)
        model = BertForSequenceClassification(config).eval()
    model.save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_hf_bert(tmp_path_factory.mktemp("hf") / "tiny-bert")


@pytest.fixture(scope="session")
def tiny_hf_bundle(tiny_hf_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundles") / "tiny-bert"
    export_bundle(tiny_hf_dir, out)
    return out
