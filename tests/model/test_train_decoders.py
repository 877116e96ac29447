"""`attnserve train --init DIR --head pooler` on decoders (tests/helpers/decoders.py): a Qwen3Model, a Gemma3TextModel
(a sliding layer of 4 under the causal mask, sandwich norms) and a Qwen3ForSequenceClassification with our labels,
each trained a few steps on the toy task of tests/model/test_train.py. The head is the family's own, transformers'
bias-free `score` on the last real token; it and the body learn; the checkpoint gives back the held-out figures
training recorded; its weights, mapped back through the family's table (the gated `up` cut into gate_proj and
up_proj again), load into transformers' own ...ForSequenceClassification, whose logits equal ours to 1e-5, and so do
the exported bundle's. No code path writes a Hugging Face directory: the mapping back is this test's own.

Shape letters: B batch, C labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor

from bundle.session import open_session
from export.bundle import export_bundle
from model.encoder import Encoder
from model.families import FAMILIES, family_of, hf_layers
from model.load import load_model
from model.sentence import read_json
from model.tokenizer import pad_batch, pad_id, token_ids
from model.training.cli import SPLIT_SEED, build_parser, main
from model.training.data import from_pairs, load_dataset, split
from model.training.features import FeatureTask, extract_features
from model.training.loop import Split, TextTask
from model.training.recipes import from_init, make_task
from tests.helpers.decoders import model_class, save_decoder, tokenizer_for
from tests.helpers.families import padded_batches, save_hf
from tests.model.test_train import toy_pairs, write_data

TOLERANCE = 1e-5
LABELS = {0: "neg", 1: "pos"}  # the toy task's labels, in the order training numbers them
STARTS = {"qwen3": ("qwen3", "Model"), "gemma3": ("gemma3", "Model"),
          "qwen3-classifier": ("qwen3", "ForSequenceClassification")}
SEED, MAX_LENGTH = 0, 32
CPU = torch.device("cpu")


@dataclass
class Trained:
    arch: str
    head: str  # the base's class: Model or ForSequenceClassification
    base: Path
    data: Path
    out: Path
    initial: Encoder  # what training started from: from_init under the CLI's seed


@pytest.fixture(scope="module", params=list(STARTS))
def trained(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Trained:
    arch, head = STARTS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    save_decoder(root / "base", arch, head, "small", names=LABELS)
    data = write_data(root / "data.jsonl", toy_pairs(24))
    torch.manual_seed(SEED)  # the CLI's seed before it builds the head: the same fresh head, weight for weight
    initial, _ = from_init(root / "base", "pooler", tuple(LABELS.values()))
    args = ["--data", str(data), "--init", str(root / "base"), "--head", "pooler", "--epochs", "3", "--batch-size",
            "8", "--lr", "3e-3", "--max-length", str(MAX_LENGTH), "--seed", str(SEED), "--no-progress",
            "--out", str(root / "out")]
    assert main(args) == 0
    return Trained(arch, head, root / "base", data, root / "out", initial)


def test_pooler_is_the_familys_score_and_it_learns(trained: Trained) -> None:
    checkpoint = load_model(trained.out)
    config, state = checkpoint.encoder.config, checkpoint.encoder.state_dict()
    assert (config.head, config.head_bias, config.pooling) == ("linear", False, "lasttoken")
    assert config.labels == list(LABELS.values())
    assert {k for k in state if k.startswith("head.")} == {"head.classifier.weight"}
    start = trained.initial.state_dict()
    if trained.head == "ForSequenceClassification":
        score = load_model(trained.base).encoder.state_dict()["head.classifier.weight"]
        assert torch.equal(start["head.classifier.weight"], score)  # same labels: its own score goes on training
    for name in ("head.classifier.weight", "blocks.0.ffn.up.weight", "embeddings.token.weight"):
        assert not torch.equal(state[name], start[name]), f"{name} did not change"
    history = read_json(trained.out / "metrics.json")["history"]
    assert history[-1]["train_loss"] < 0.8 * history[0]["train_loss"]
    again = from_init(trained.out, "pooler", tuple(LABELS.values()))[0]  # our checkpoint: its head goes on
    assert again.config == config
    assert torch.equal(again.state_dict()["head.classifier.weight"], state["head.classifier.weight"])


def test_checkpoint_gives_back_the_held_out_figures_training_recorded(trained: Trained) -> None:
    checkpoint = load_model(trained.out)
    _, val = split(load_dataset(trained.data), 0.2, SPLIT_SEED)
    ids = Split(token_ids(checkpoint.tokenizer, val.texts, MAX_LENGTH), val.labels)
    task = TextTask(checkpoint.encoder, ids, ids, 8, CPU, pad_id(checkpoint.tokenizer))
    figures, best = task.evaluate(val.label_names), read_json(trained.out / "metrics.json")["best"]
    assert abs(figures["val_loss"] - best["val_loss"]) <= TOLERANCE
    assert figures["confusion_matrix"] == best["confusion_matrix"]


def transformers_weights(ours: dict[str, Tensor], hf: dict[str, object]) -> dict[str, Tensor]:
    """Our state dict under transformers' names by the family's body and sequence-head tables: the head's at the top,
    the body's under the family's prefix, and part k of a tensor several of theirs make ("ffn.up#k") cut out again."""
    family, _ = family_of(hf)
    heads, out = family.heads["sequence"], {}
    table = {**family.table, **heads}
    for layer in range(hf_layers(hf)):
        for theirs, mine in table.items():
            module, _, part = str(mine).format(i=layer).partition("#")
            for param in ("weight", "bias"):
                tensor = ours.get(f"{module}.{param}")
                if tensor is None:
                    continue
                name = f"{theirs.format(i=layer)}.{param}"
                out[name if theirs in heads else family.prefix + name] = (
                    tensor.chunk(_parts(table, str(mine)))[int(part)] if part else tensor)
    return out


def _parts(table: dict[str, object], mine: str) -> int:
    """How many of the checkpoint's tensors make ours ("ffn.up#0", "ffn.up#1": two)."""
    whole = mine.partition("#")[0]
    return sum(str(value).partition("#")[0] == whole for value in table.values())


def test_trained_weights_give_transformers_own_classifier_the_same_logits(trained: Trained) -> None:
    ours = load_model(trained.out).encoder.eval()
    hf = read_json(trained.base / "config.json")
    reference = model_class(trained.arch, "ForSequenceClassification").from_pretrained(
        trained.base, attn_implementation="eager").eval()  # a base model's score is new here; every weight is ours
    reference.load_state_dict(transformers_weights(ours.state_dict(), hf), strict=True)
    for ids, mask in padded_batches(tokenizer_for(trained.arch)):
        with torch.no_grad():
            diff = ours(ids, mask).logits - reference(input_ids=ids, attention_mask=mask).logits  # (B, C)
        assert diff.abs().max() <= TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize("trained", ["gemma3"], indirect=True)
def test_bundle_gives_the_checkpoints_logits(trained: Trained, tmp_path: Path) -> None:
    """One decoder exported (export_bundle's two graphs take ~20 CPU seconds): Gemma3, whose checkpoint carries the
    most axes through its config (layer types, two rotary bases, the query scale, the embedding scale)."""
    export_bundle(trained.out, tmp_path / "bundle", ["fp32"])
    session = open_session(tmp_path / "bundle" / "fast-fp32.onnx")
    ours = load_model(trained.out).encoder.eval()
    for ids, mask in padded_batches(tokenizer_for(trained.arch)):
        with torch.no_grad():
            expected = ours(ids, mask).logits.numpy()  # (B, C)
        (logits,) = session.run(["logits"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        assert np.abs(logits - expected).max() <= TOLERANCE


@pytest.mark.parametrize("head", ["pooler", "attention"])
def test_frozen_decoders_cached_features_give_its_logits(tmp_path: Path, head: str) -> None:
    """--freeze-encoder: the head trains on cached states (the last real token's for the family's score; all real
    tokens under the causal mask for an attention head), which must give the whole model's logits."""
    save_decoder(tmp_path, "gemma3", "Model", "small", names=LABELS)
    torch.manual_seed(SEED)
    encoder, tokenizer = from_init(tmp_path, head, tuple(LABELS.values()))
    texts = [text for text, _ in toy_pairs(8)]
    ids = token_ids(tokenizer, texts, MAX_LENGTH)
    cached = extract_features(encoder.eval(), ids, pad_id(tokenizer), 4, CPU, progress=False)
    task = FeatureTask(encoder, Split(cached, [0] * 8), Split(cached, [0] * 8), 8, CPU)
    input_ids, attention_mask = pad_batch(ids, pad_id(tokenizer))  # (B, T) each
    with torch.no_grad():
        full = encoder(input_ids, attention_mask).logits  # (B, C)
        assert (task.logits(task.collate(cached)) - full).abs().max() <= TOLERANCE


@pytest.mark.parametrize("arch", ["qwen3", "roberta"])
def test_training_inputs_stop_where_positions_do(tmp_path: Path, arch: str) -> None:
    """--max-length beyond the model: a decoder stops at max_position_embeddings, RoBERTa at its table less the pad
    offset (514 rows hold 512 tokens), and the longest input still runs."""
    if arch == "roberta":
        save_hf(tmp_path, arch, "Model", "small")
    else:
        save_decoder(tmp_path, arch, "Model", "small", max_position_embeddings=20)
    loaded = load_model(tmp_path)
    data = from_pairs([(" ".join(["film"] * 200), "a"), ("short", "b")])
    task = make_task(loaded.encoder, loaded.tokenizer, data, data, False, 2, 1000, CPU)
    limit = loaded.encoder.config.position_limit
    assert max(task.train.lengths) == limit == (20 if arch == "qwen3" else loaded.encoder.config.max_length - 2)
    with torch.no_grad():
        states = loaded.encoder(*task.collate(task.train.examples)).token_states  # (B, T, D)
    assert states.shape[1] == limit


def test_help_names_every_family_init_takes() -> None:
    init = next(action for action in build_parser("attnserve train")._actions if action.dest == "init")
    for text in (init.help or "", build_parser("attnserve train").description or ""):
        missing = [f.name for f in FAMILIES
                   if f.modality == "text" and not f.pair and f.name.casefold() not in text.casefold()]
        assert missing == []  # the vision families read pixels, CLIP's and SigLIP's towers are not inits (yet)
