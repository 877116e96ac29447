"""Training: the loop learns a toy task it is then tested on with unseen texts, the cached-feature path
equals the full encoder, and `attnserve train` learns, keeps its best epoch, or fails with a clear message."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer

from model.encoder import Encoder
from model.load import load_model
from model.tokenizer import encode, pad_batch, pad_id, token_ids, train_wordpiece
from model.training.cli import SPLIT_SEED, main
from model.training.data import from_pairs, load_dataset, split
from model.training.features import FeatureTask, extract_features
from model.training.loop import Split, TextTask, TrainSettings, fit, linear_schedule
from model.training.metrics import accuracy
from model.training.recipes import with_head
from tests.helpers.tiny import tiny_config

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


def encoder_for(tokenizer: Tokenizer, **changes: Any) -> Encoder:
    """The shared tiny encoder (linear head, labels neg/pos) sized to `tokenizer`'s vocabulary."""
    return Encoder(tiny_config(vocab_size=tokenizer.get_vocab_size()).replace(**changes))


@pytest.fixture(scope="module")
def toy():
    data = from_pairs(toy_pairs(32))
    tokenizer = train_wordpiece(data.texts, vocab_size=120, min_frequency=1)
    return data, tokenizer, token_ids(tokenizer, data.texts, 32)


def test_training_learns_a_keyword_task_and_generalises_to_held_out_texts():
    train, val = from_pairs(toy_pairs(64, seed=0)), from_pairs(toy_pairs(64, seed=1))
    assert not set(train.texts) & set(val.texts)  # no held-out text was seen in training
    assert val.labels.count(0) == val.labels.count(1)  # chance is 0.5
    tokenizer = train_wordpiece(train.texts, vocab_size=120, min_frequency=1)
    torch.manual_seed(0)
    task = TextTask(encoder_for(tokenizer), Split(token_ids(tokenizer, train.texts, 32), train.labels),
                    Split(token_ids(tokenizer, val.texts, 32), val.labels), batch_size=8, device=CPU,
                    pad=pad_id(tokenizer))
    history = fit(task, TrainSettings(epochs=8, batch_size=8, lr=3e-3, seed=0, progress=False), train.label_names)
    assert history[-1]["accuracy"] >= 0.9 and history[-1]["macro_f1"] >= 0.9
    assert history[-1]["train_loss"] < 0.25 * history[0]["train_loss"]


@pytest.mark.parametrize("head", ["linear", "pooler", "attention"])
def test_cached_features_give_the_full_encoders_logits(toy, head):
    data, tokenizer, ids = toy
    torch.manual_seed(0)
    encoder = encoder_for(tokenizer, head=head).eval()
    cached = extract_features(encoder, ids, pad=0, batch_size=8, device=CPU, progress=False)
    task = FeatureTask(encoder, Split(cached, data.labels), Split(cached, data.labels), 8, CPU)
    states, mask = task.collate(cached)
    input_ids, attention_mask = pad_batch(ids, 0)
    with torch.no_grad():
        torch.testing.assert_close(task.logits((states, mask)), encoder(input_ids, attention_mask).logits)


def test_frozen_training_changes_only_the_head(toy):
    data, tokenizer, ids = toy
    encoder = encoder_for(tokenizer, head="attention")
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    cached = extract_features(encoder, ids, pad=0, batch_size=8, device=CPU, progress=False)
    split = Split(cached, data.labels)
    fit(FeatureTask(encoder, split, split, 8, CPU), TrainSettings(epochs=2, lr=1e-2, progress=False), data.label_names)
    changed = {k for k, v in encoder.state_dict().items() if not torch.equal(v, before[k])}
    assert changed and all(k.startswith("head.") for k in changed)


def test_with_head_keeps_the_body_and_replaces_the_head():
    body = Encoder(tiny_config(head=False))
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
           "--batch-size", "8", "--max-length", "16", "--no-progress"]
CHECKPOINT_FILES = {"config.json", "model.safetensors", "tokenizer.json", "labels.json", "metrics.json"}


def write_data(path, pairs, text="text", label="label"):
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps({text: t, label: y}) + "\n" for t, y in pairs))
    else:
        path.write_text(f"{text},{label}\n" + "".join(f"{t},{y}\n" for t, y in pairs))
    return path


def body(encoder: Encoder) -> dict[str, torch.Tensor]:
    return {k: v for k, v in encoder.state_dict().items() if not k.startswith("head.")}


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_cli_trains_from_scratch_learns_and_keeps_the_best_epoch(tmp_path, suffix):
    data = write_data(tmp_path / f"data{suffix}", toy_pairs(160))
    args = ["--data", str(data), "--out", str(tmp_path / "out"), *SCRATCH, "--epochs", "6", "--lr", "3e-3"]
    assert main(args, prog="attnserve train") == 0
    assert {p.name for p in (tmp_path / "out").iterdir()} >= CHECKPOINT_FILES
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    history = metrics["history"]
    assert (metrics["data"]["train"], metrics["data"]["val"], len(history)) == (128, 32, 6)
    assert history[-1]["accuracy"] >= 0.9  # held out, both labels equally common: chance is 0.5
    ranks = [(r["accuracy"], r["macro_f1"]) for r in history]  # accuracy decides, macro-F1 breaks ties, then earliest
    assert metrics["best_epoch"] == ranks.index(max(ranks)) + 1
    assert metrics["best"] == history[metrics["best_epoch"] - 1]
    assert set(metrics["best"]["per_class"]) == {"neg", "pos"}
    loaded = load_model(tmp_path / "out")
    assert loaded.encoder.config.label_names == ("neg", "pos")
    _, val = split(load_dataset(data), 0.2, SPLIT_SEED)
    with torch.no_grad():
        logits = loaded.encoder(*encode(loaded.tokenizer, val.texts, 16)).logits
    assert accuracy(val.labels, logits.argmax(-1).tolist()) == metrics["best"]["accuracy"]  # the kept weights


def test_cli_fine_tunes_a_checkpoint_with_a_frozen_encoder(tmp_path):
    data = write_data(tmp_path / "data.jsonl", toy_pairs(40))
    assert main(["--data", str(data), "--out", str(tmp_path / "base"), *SCRATCH, "--epochs", "1"]) == 0
    args = ["--data", str(data), "--init", str(tmp_path / "base"), "--freeze-encoder", "--head", "attention",
            "--epochs", "1", "--no-progress", "--out", str(tmp_path / "tuned")]
    assert main(args) == 0
    base, tuned = load_model(tmp_path / "base").encoder, load_model(tmp_path / "tuned").encoder
    assert tuned.config.head == "attention" and base.config.head == "linear"
    base_body, tuned_body = body(base), body(tuned)
    assert base_body.keys() == tuned_body.keys()
    assert all(torch.equal(base_body[k], tuned_body[k]) for k in base_body)  # only the head learned
    assert json.loads((tmp_path / "tuned" / "metrics.json").read_text())["mode"] == "frozen"


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
