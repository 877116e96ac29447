"""Our loader against `transformers` itself, on tiny randomly initialised BERTs made in the test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers

from model.load import load_model
from model.tokenizer import encode, train_wordpiece

TEXTS = [
    "the film was a delight from start to finish",
    "a dull and lifeless remake",
    "I laughed, I cried, I left the cinema smiling",
    "not good",
    "the plot makes no sense and the acting is wooden",
    "brilliant",
]


def _save_tiny_bert(path: Path, cls: type, **extra: object) -> None:
    tokenizer = train_wordpiece(TEXTS * 3, vocab_size=200, min_frequency=1)
    config = transformers.BertConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=32, attn_implementation="eager", **extra,
    )
    torch.manual_seed(0)
    cls(config).eval().save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))


def _reference(path: Path, cls: type) -> torch.nn.Module:
    return cls.from_pretrained(path, attn_implementation="eager").eval()


def _inputs(loaded) -> tuple[torch.Tensor, torch.Tensor]:
    return encode(loaded.tokenizer, TEXTS, 32)


def test_bert_model_token_states_and_attentions_match_transformers(tmp_path: Path) -> None:
    _save_tiny_bert(tmp_path, transformers.BertModel)
    loaded = load_model(tmp_path)
    ids, mask = _inputs(loaded)
    with torch.no_grad():
        ours = loaded.encoder(ids, mask, output_attentions=True)
        ref = _reference(tmp_path, transformers.BertModel)(input_ids=ids, attention_mask=mask, output_attentions=True)
    real = mask.bool()
    assert (ours.token_states[real] - ref.last_hidden_state[real]).abs().max() <= 1e-5
    ref_attn = torch.stack(ref.attentions, dim=1)  # (B, L, H, T, T)
    rows = real[:, None, None, :, None].expand_as(ref_attn)
    assert (ours.attentions[rows] - ref_attn[rows]).abs().max() <= 1e-5
    assert loaded.kind == "hf-bert"


def test_sequence_classification_logits_and_labels_match(tmp_path: Path) -> None:
    labels = {0: "negative", 1: "neutral", 2: "positive"}
    _save_tiny_bert(tmp_path, transformers.BertForSequenceClassification, id2label=labels,
                    label2id={v: k for k, v in labels.items()})
    loaded = load_model(tmp_path)
    ids, mask = _inputs(loaded)
    with torch.no_grad():
        ours = loaded.encoder(ids, mask).logits
        ref = _reference(tmp_path, transformers.BertForSequenceClassification)(input_ids=ids, attention_mask=mask)
    assert (ours - ref.logits).abs().max() <= 1e-5
    assert loaded.encoder.config.label_names == ("negative", "neutral", "positive")


@pytest.mark.parametrize("mode,normalize", [("mean", True), ("cls", False)])
def test_sentence_transformers_pooling_matches(tmp_path: Path, mode: str, normalize: bool) -> None:
    _save_tiny_bert(tmp_path, transformers.BertModel)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_mean_tokens": mode == "mean", "pooling_mode_cls_token": mode == "cls"}))
    loaded = load_model(tmp_path)
    ids, mask = _inputs(loaded)
    with torch.no_grad():
        ours = loaded.encoder(ids, mask).embedding
        states = _reference(tmp_path, transformers.BertModel)(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).float()
    ref = (states * m).sum(1) / m.sum(1) if mode == "mean" else states[:, 0]
    ref = torch.nn.functional.normalize(ref, dim=-1) if normalize else ref
    assert (ours - ref).abs().max() <= 1e-5
    assert loaded.kind == "sentence-transformers"


def test_pytorch_bin_weights_load_without_pickle_code(tmp_path: Path) -> None:
    _save_tiny_bert(tmp_path, transformers.BertModel)
    from_safetensors = load_model(tmp_path)
    weights = transformers.BertModel.from_pretrained(tmp_path).state_dict()
    (tmp_path / "model.safetensors").unlink()
    torch.save(weights, tmp_path / "pytorch_model.bin")
    from_bin = load_model(tmp_path)
    ids, mask = _inputs(from_bin)
    with torch.no_grad():
        assert torch.equal(from_bin.encoder(ids, mask).token_states, from_safetensors.encoder(ids, mask).token_states)


@pytest.mark.parametrize("missing", ["tokenizer.json", "model.safetensors", "config.json"])
def test_missing_files_are_named(tmp_path: Path, missing: str) -> None:
    _save_tiny_bert(tmp_path, transformers.BertModel)
    (tmp_path / missing).unlink()
    with pytest.raises((FileNotFoundError, ValueError), match=missing.replace(".", r"\.") if missing != "config.json"
                       else "config.json"):
        load_model(tmp_path)


def test_unsupported_architecture_is_named(tmp_path: Path) -> None:
    _save_tiny_bert(tmp_path, transformers.BertModel)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(ValueError, match="'gpt2' is not supported"):
        load_model(tmp_path)
