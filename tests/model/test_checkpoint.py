"""Checkpoint directories: a round trip gives the same model, a save replaces the old checkpoint whole,
and a save that fails half-way leaves the old one exactly as it was (and loadable)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

import model.checkpoint
from model.checkpoint import load_checkpoint, save_checkpoint
from model.config import EncoderConfig
from model.encoder import Encoder
from model.tokenizer import encode, train_wordpiece
from tests.helpers.tiny import SENTENCES, tiny_config


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_wordpiece(SENTENCES, vocab_size=200, min_frequency=1)


def seeded_encoder(tokenizer: Tokenizer, seed: int, config: EncoderConfig | None = None) -> Encoder:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return Encoder(config or tiny_config(vocab_size=tokenizer.get_vocab_size())).eval()


def logits(encoder: Encoder, tokenizer: Tokenizer) -> torch.Tensor:
    input_ids, attention_mask = encode(tokenizer, SENTENCES[:4], 16)
    with torch.no_grad():
        out = encoder(input_ids, attention_mask).logits
    assert out is not None
    return out


def test_round_trip_gives_the_same_config_labels_metrics_and_outputs(tmp_path: Path, tokenizer: Tokenizer) -> None:
    config = tiny_config(vocab_size=tokenizer.get_vocab_size()).replace(head="attention", normalize=True)
    encoder = seeded_encoder(tokenizer, 0, config)
    save_checkpoint(tmp_path / "ckpt", encoder, tokenizer, {"accuracy": 1.0})
    loaded = load_checkpoint(tmp_path / "ckpt")
    assert loaded.encoder.config == config and loaded.kind == "attnserve"
    assert json.loads((tmp_path / "ckpt" / "labels.json").read_text()) == ["neg", "pos"]
    assert json.loads((tmp_path / "ckpt" / "metrics.json").read_text()) == {"accuracy": 1.0}
    assert loaded.tokenizer.to_str() == tokenizer.to_str()
    input_ids, attention_mask = encode(tokenizer, SENTENCES[:4], 16)
    with torch.no_grad():
        ours, theirs = encoder(input_ids, attention_mask), loaded.encoder(input_ids, attention_mask)
    assert ours.logits is not None and theirs.logits is not None
    assert torch.equal(ours.logits, theirs.logits) and torch.equal(ours.embedding, theirs.embedding)


def contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def torn_weights(tensors: dict, filename: str, metadata: dict | None = None) -> None:
    Path(filename).write_bytes(b"\0" * 64)  # part of a file is on disk, then the write fails
    raise OSError("disk full")


class TornTokenizer:
    """Stands in for a tokenizer whose save fails after writing part of tokenizer.json."""

    def save(self, path: str) -> None:
        Path(path).write_text('{"version": ')
        raise OSError("disk full")


@pytest.mark.parametrize("failing", ["weights", "tokenizer"])
def test_a_save_that_fails_half_way_leaves_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tokenizer: Tokenizer, failing: str,
) -> None:
    target, old = tmp_path / "ckpt", seeded_encoder(tokenizer, 0)
    save_checkpoint(target, old, tokenizer, {"epoch": 1})
    before = contents(target)
    if failing == "weights":
        monkeypatch.setattr(model.checkpoint, "save_file", torn_weights)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(target, seeded_encoder(tokenizer, 1),
                        TornTokenizer() if failing == "tokenizer" else tokenizer, {"epoch": 2})  # type: ignore[arg-type]
    assert contents(target) == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # the half-written staging directory is gone
    assert torch.equal(logits(load_checkpoint(target).encoder, tokenizer), logits(old, tokenizer))


def test_a_successful_save_replaces_the_previous_checkpoint_whole(tmp_path: Path, tokenizer: Tokenizer) -> None:
    target, old, new = tmp_path / "ckpt", seeded_encoder(tokenizer, 0), seeded_encoder(tokenizer, 1)
    save_checkpoint(target, old, tokenizer, {"epoch": 1})
    save_checkpoint(target, new, tokenizer)  # no metrics this time
    assert not (target / "metrics.json").exists()  # replaced, not merged into the old directory
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
    assert target.stat().st_mode & 0o777 == 0o755  # readable by the service's user, not mkdtemp's 0o700
    unreadable = [p.name for p in target.iterdir() if p.stat().st_mode & 0o044 != 0o044]
    assert unreadable == []  # model.safetensors included (safetensors 0.8 alone writes it 0o600)
    loaded = logits(load_checkpoint(target).encoder, tokenizer)
    assert torch.equal(loaded, logits(new, tokenizer))
    assert not torch.equal(loaded, logits(old, tokenizer))
