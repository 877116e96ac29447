"""sentence-transformers directories against sentence-transformers itself: every pooling mode, a Dense
projection with its activation, Normalize, max_seq_length and prompts, over several families
(tests/helpers/sentence.py writes the directories with sentence-transformers' own save)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from model.load import load_model
from model.sentence import pooling_mode
from model.tokenizer import encode
from tests.helpers.sentence import PROMPTS, load_reference, save_sentence_transformer
from tests.helpers.tokenizers import MULTILINGUAL

TEXTS = [*MULTILINGUAL, " ".join(MULTILINGUAL)]  # the last is longer than max_seq_length (20)
CASES = [  # arch, pooling, dense activation, normalize
    ("mpnet", "weightedmean", "tanh", True),
    ("bert", "mean", None, True),
    ("xlm-roberta", "cls", "identity", False),
    ("modernbert", "max", None, True),
    ("distilbert", "lasttoken", "relu", False),
    ("roberta", "mean_sqrt_len_tokens", None, False),
]


def ours(loaded, texts: list[str]) -> torch.Tensor:  # type: ignore[no-untyped-def]
    ids, mask = encode(loaded.tokenizer, texts, loaded.encoder.config.serving_length)  # (B, T)
    with torch.no_grad():
        return loaded.encoder(ids, mask).embedding  # (B, E)


@pytest.mark.parametrize("arch,pooling,dense,normalize", CASES)
def test_embeddings_match_sentence_transformers(tmp_path: Path, arch: str, pooling: str, dense: str | None,
                                                normalize: bool) -> None:
    directory = save_sentence_transformer(tmp_path / "st", arch, pooling, dense, normalize, default_prompt_name="query")
    reference, loaded = load_reference(directory), load_model(directory)
    assert loaded.kind == "sentence-transformers" and loaded.encoder.config.serving_length == 20
    assert loaded.prompts == PROMPTS and loaded.default_prompt_name == "query"
    expected = reference.encode(TEXTS, convert_to_tensor=True)  # type: ignore[attr-defined]  # the default prompt
    got = ours(loaded, [PROMPTS["query"] + t for t in TEXTS])
    assert got.shape == expected.shape == (len(TEXTS), loaded.encoder.config.embedding_size)
    assert (got - expected).abs().max() <= 1e-5
    document = reference.encode(TEXTS, prompt_name="document", convert_to_tensor=True)  # type: ignore[attr-defined]
    assert (ours(loaded, [PROMPTS["document"] + t for t in TEXTS]) - document).abs().max() <= 1e-5


def test_legacy_sentence_bert_config_and_pooling_flags(tmp_path: Path) -> None:
    """Checkpoints written by older sentence-transformers (all-MiniLM-L6-v2's layout) read the same."""
    directory = save_sentence_transformer(tmp_path / "st", "bert", "mean", normalize=True)
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 12, "do_lower_case": False}))
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True}))
    config = load_model(directory).encoder.config
    assert (config.serving_length, config.pooling, config.normalize) == (12, "mean", True)


@pytest.mark.parametrize("config,message", [
    ({"pooling_mode": ["cls", "mean"]}, "exactly one pooling mode"),
    ({"pooling_mode": "mean", "include_prompt": False}, "include_prompt false"),
    ({"pooling_mode_cls_token": True, "pooling_mode_max_tokens": True}, "exactly one pooling mode"),
])
def test_pooling_it_cannot_reproduce_is_refused(config: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pooling_mode(config, Path("1_Pooling"))


def test_unknown_module_is_refused(tmp_path: Path) -> None:
    directory = save_sentence_transformer(tmp_path / "st", "bert", "mean")
    modules = json.loads((directory / "modules.json").read_text())
    modules.append({"idx": 9, "name": "9", "path": "9_LayerNorm", "type": "sentence_transformers.models.LayerNorm"})
    (directory / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match="module 'LayerNorm' is not supported; supported: Transformer, Pooling"):
        load_model(directory)
