"""Training: the loop learns, the cached-feature path equals the full encoder, checkpoints round-trip,
and `attnserve train` writes a complete checkpoint or fails with a clear message."""

from __future__ import annotations

import json
import random

import pytest
import torch

from model.checkpoint import save_checkpoint
from model.config import EncoderConfig
from model.encoder import Encoder
from model.load import load_model
from model.tokenizer import pad_batch, token_ids, train_wordpiece
from model.training.cli import main
from model.training.data import from_pairs
from model.training.features import FeatureTask, extract_features
from model.training.loop import Split, TextTask, TrainSettings, fit, linear_schedule
from model.training.recipes import with_head

POSITIVE = ["good", "great", "fine", "lovely", "superb"]
NEGATIVE = ["bad", "awful", "poor", "dull", "boring"]
FILLER = ["the", "film", "was", "a", "plot", "actors", "really", "quite"]
CPU = torch.device("cpu")


def toy_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        label = "pos" if i % 2 else "neg"
        words = rng.sample(FILLER, 4) + [rng.choice(POSITIVE if label == "pos" else NEGATIVE)]
        rng.shuffle(words)
        pairs.append((" ".join(words), label))
    return pairs


def tiny_config(**changes) -> EncoderConfig:
    base = EncoderConfig(vocab_size=120, d_model=64, num_heads=2, num_layers=1, d_ff=128, max_length=32,
                         dropout=0.0, attention_dropout=0.0, head_dropout=0.0)
    return base.replace(**changes)


@pytest.fixture(scope="module")
def toy():
    data = from_pairs(toy_pairs(32))
    tokenizer = train_wordpiece(data.texts, vocab_size=120, min_frequency=1)
    return data, tokenizer, token_ids(tokenizer, data.texts, 32)


def test_training_overfits_a_small_slice(toy):
    data, tokenizer, ids = toy
    torch.manual_seed(0)
    encoder = Encoder(tiny_config(vocab_size=tokenizer.get_vocab_size(), head="linear", num_labels=2))
    split = Split(ids, data.labels)
    task = TextTask(encoder, split, split, batch_size=8, device=CPU, pad=0)
    settings = TrainSettings(epochs=15, batch_size=8, lr=3e-3, seed=0, progress=False)
    history = fit(task, settings, data.label_names)
    assert history[-1]["train_loss"] < 0.25 * history[0]["train_loss"]
    assert history[-1]["accuracy"] == 1.0


@pytest.mark.parametrize("head", ["linear", "pooler", "attention"])
def test_cached_features_give_the_full_encoders_logits(toy, head):
    data, tokenizer, ids = toy
    torch.manual_seed(0)
    encoder = Encoder(tiny_config(vocab_size=tokenizer.get_vocab_size(), head=head, num_labels=2)).eval()
    cached = extract_features(encoder, ids, pad=0, batch_size=8, device=CPU, progress=False)
    task = FeatureTask(encoder, Split(cached, data.labels), Split(cached, data.labels), 8, CPU)
    states, mask = task.collate(cached)
    input_ids, attention_mask = pad_batch(ids, 0)
    with torch.no_grad():
        torch.testing.assert_close(task.logits((states, mask)), encoder(input_ids, attention_mask).logits)


def test_frozen_training_changes_only_the_head(toy):
    data, tokenizer, ids = toy
    encoder = Encoder(tiny_config(vocab_size=tokenizer.get_vocab_size(), head="attention", num_labels=2))
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    cached = extract_features(encoder, ids, pad=0, batch_size=8, device=CPU, progress=False)
    split = Split(cached, data.labels)
    fit(FeatureTask(encoder, split, split, 8, CPU), TrainSettings(epochs=2, lr=1e-2, progress=False), data.label_names)
    changed = {k for k, v in encoder.state_dict().items() if not torch.equal(v, before[k])}
    assert changed and all(k.startswith("head.") for k in changed)


def test_checkpoint_round_trip_gives_identical_outputs(toy, tmp_path):
    data, tokenizer, ids = toy
    config = tiny_config(vocab_size=tokenizer.get_vocab_size(), head="attention", num_labels=2,
                         label_names=("neg", "pos"), normalize=True)
    encoder = Encoder(config).eval()
    save_checkpoint(tmp_path / "ckpt", encoder, tokenizer, {"accuracy": 1.0})
    loaded = load_model(tmp_path / "ckpt")
    assert loaded.encoder.config == config
    assert json.loads((tmp_path / "ckpt" / "labels.json").read_text()) == ["neg", "pos"]
    input_ids = torch.tensor([ids[0] + [0] * 3, ids[1][:4] + [0] * (len(ids[0]) - 1)])
    with torch.no_grad():
        a, b = encoder(input_ids, (input_ids != 0).long()), loaded.encoder(input_ids, (input_ids != 0).long())
    assert torch.equal(a.logits, b.logits) and torch.equal(a.embedding, b.embedding)


def test_with_head_keeps_the_body_and_replaces_the_head():
    body = Encoder(tiny_config())
    new = with_head(body, "linear", ["a", "b", "c"])
    assert new.config.num_labels == 3 and new.head is not None
    assert torch.equal(new.embeddings.token.weight, body.embeddings.token.weight)
    assert with_head(new, "linear", ["a", "b", "c"]) is new


def test_linear_schedule_warms_up_then_decays():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = linear_schedule(optimizer, warmup_steps=2, total_steps=6)
    rates = []
    for _ in range(6):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert rates == pytest.approx([0.5, 1.0, 1.0, 0.75, 0.5, 0.25])


SCRATCH = ["--from-scratch", "--d-model", "32", "--layers", "1", "--heads", "1", "--vocab-size", "100",
           "--epochs", "2", "--batch-size", "8", "--max-length", "16", "--no-progress"]
CHECKPOINT_FILES = {"config.json", "model.safetensors", "tokenizer.json", "labels.json", "metrics.json"}


def write_data(path, pairs, text="text", label="label"):
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps({text: t, label: y}) + "\n" for t, y in pairs))
    else:
        path.write_text(f"{text},{label}\n" + "".join(f"{t},{y}\n" for t, y in pairs))
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_cli_trains_from_scratch_and_writes_a_checkpoint(tmp_path, suffix):
    data = write_data(tmp_path / f"data{suffix}", toy_pairs(40))
    assert main(["--data", str(data), "--out", str(tmp_path / "out"), *SCRATCH], prog="attnserve train") == 0
    assert {p.name for p in (tmp_path / "out").iterdir()} >= CHECKPOINT_FILES
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert len(metrics["history"]) == 2 and 0.0 <= metrics["best"]["accuracy"] <= 1.0
    assert set(metrics["best"]["per_class"]) == {"neg", "pos"}
    assert load_model(tmp_path / "out").encoder.config.label_names == ("neg", "pos")


def test_cli_fine_tunes_a_checkpoint_with_a_frozen_encoder(tmp_path):
    data = write_data(tmp_path / "data.jsonl", toy_pairs(40))
    assert main(["--data", str(data), "--out", str(tmp_path / "base"), *SCRATCH]) == 0
    args = ["--data", str(data), "--init", str(tmp_path / "base"), "--freeze-encoder", "--head", "attention",
            "--epochs", "1", "--no-progress", "--out", str(tmp_path / "tuned")]
    assert main(args) == 0
    assert load_model(tmp_path / "tuned").encoder.config.head == "attention"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--text-column", "body"], "no column 'body'"),
        (["--data", "{tmp}/missing.jsonl"], "data file not found"),
        (["--init", "{tmp}/nowhere"], "model directory not found"),
        (["--freeze-encoder"], "--freeze-encoder needs a trained encoder"),
    ],
)
def test_cli_bad_input_exits_non_zero_with_a_clear_message(tmp_path, capsys, args, message):
    data = write_data(tmp_path / "data.jsonl", toy_pairs(10))
    args = [a.format(tmp=tmp_path) for a in args]
    if "--data" not in args:
        args = ["--data", str(data), *args]
    if "--init" not in args:
        args = [*args, *SCRATCH]
    code = main([*args, "--out", str(tmp_path / "out")], prog="attnserve train")
    err = capsys.readouterr().err
    assert code != 0 and message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_cli_single_label_is_refused(tmp_path, capsys):
    data = write_data(tmp_path / "data.csv", [("good", "pos"), ("fine", "pos")])
    assert main(["--data", str(data), "--out", str(tmp_path / "out"), *SCRATCH]) != 0
    assert "at least two labels" in capsys.readouterr().err
