"""The layout registry (model/layouts.py): every layout is recognised from a directory laid out as it (built by the
helpers the loader tests use), and the source hash covers exactly that layout's files, through the one door; what
the door refuses from a directory's small files alone (model.load.check_config, before a pull fetches weights)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bundle.files import sha256_file
from export.bundle import source_sha256
from model.layouts import LAYOUTS, layout_of
from model.load import check_config, load_model
from tests.helpers.adapters import save_adapter
from tests.helpers.bge_m3 import save_bge_m3
from tests.helpers.colbert import save_colbert_ai, save_pylate
from tests.helpers.families import save_hf
from tests.helpers.jina import save_released
from tests.helpers.sentence import save_sentence_transformer
from tests.helpers.tiny import make_tiny_checkpoint, make_tiny_hf_bert
from tests.model.test_lora import bert_loader

MODEL = ["config.json", "model.safetensors"]


def _bge_m3(root: Path) -> Path:
    save_bge_m3(root / "m3", "tiny")
    return root / "m3"


def _peft(root: Path) -> Path:
    save_hf(root / "base", "bert", "Model", "small")
    return save_adapter(root / "base", root / "lora", bert_loader, r=4, target_modules=["query", "value"])


# layout name -> (a directory laid out as it, under a root; the files its source hash covers, in order)
BUILDERS: dict[str, tuple[Callable[[Path], Path], list[str]]] = {
    "attnserve": (lambda root: make_tiny_checkpoint(root / "checkpoint"), MODEL),
    "pylate": (lambda root: save_pylate(root, "tiny")[0], MODEL),
    "colbert-ai": (lambda root: save_colbert_ai(root, "tiny"), MODEL),
    "bge-m3": (_bge_m3, [*MODEL, "colbert_linear.pt", "sparse_linear.pt"]),
    "jina-lora": (lambda root: save_released(root / "jina").directory, MODEL),
    "sentence-transformers": (lambda root: save_sentence_transformer(root / "st", "bert", "mean"), MODEL),
    "hugging-face": (lambda root: make_tiny_hf_bert(root / "hf"), MODEL),
    "peft": (_peft, ["adapter_config.json", "adapter_model.safetensors"]),
}


def test_every_layout_in_the_registry_is_tested_here() -> None:
    assert [layout.name for layout in LAYOUTS] == list(BUILDERS)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_a_layout_is_recognised_and_lists_its_files(name: str, tmp_path: Path) -> None:
    build, files = BUILDERS[name]
    directory = build(tmp_path)
    layout = layout_of(directory)
    assert layout.name == name
    assert [file.name for file in layout.files(directory)] == files


@pytest.mark.parametrize("name", [name for name in BUILDERS if name != "peft"])
def test_the_source_hash_covers_the_layouts_files(name: str, tmp_path: Path) -> None:
    build, files = BUILDERS[name]
    directory = build(tmp_path)
    loaded = load_model(directory)
    assert [file.name for file in loaded.source_files] == files
    expected = hashlib.sha256()
    for file in files:
        expected.update(f"{file}\0{sha256_file(directory / file)}\n".encode())
    assert source_sha256(loaded.source_files) == expected.hexdigest()


def test_a_peft_directory_alone_is_refused_by_the_door(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is a PEFT adapter directory; load its base with the adapter beside it"):
        load_model(_peft(tmp_path))


def test_adapters_come_through_the_door_over_their_base(tmp_path: Path) -> None:
    adapter = _peft(tmp_path)
    loaded = load_model(tmp_path / "base", adapters={"one": adapter})
    assert [a.name for a in loaded.adapters] == ["one"] and loaded.encoder.config.adapters == ("one",)
    assert [file.name for file in loaded.source_files] == MODEL  # the base's files: the adapters are not hashed


@pytest.mark.parametrize("name", list(BUILDERS))
def test_every_layout_passes_the_check_from_its_small_files(name: str, tmp_path: Path) -> None:
    directory = BUILDERS[name][0](tmp_path)
    for weights in [p for pattern in ("*.safetensors", "*.bin", "*.pt") for p in directory.glob(pattern)]:
        weights.unlink()  # as attnserve pull checks it: before the weights are fetched
    if name == "peft":
        with pytest.raises(ValueError, match="is a PEFT adapter directory"):
            check_config(directory)
    else:
        check_config(directory)


@pytest.mark.parametrize(("config", "reranker", "says"), [
    ({"model_type": "t5"}, None, "model_type 't5' is not supported"),
    ({"model_type": "bert", "architectures": ["BertForQuestionAnswering"]}, None, "architecture 'BertForQuestion"),
    ({"model_type": "bert", "architectures": ["BertModel"]}, "qwen3", "an LLM reranker is a causal LM"),
    ({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}, "llama9", "recipe 'llama9' is not known"),
    ({"architectures": ["BertModel"]}, None, "neither an attnserve checkpoint nor a Hugging Face model directory"),
])
def test_the_check_refuses_what_the_door_would(config: dict[str, object], reranker: str | None, says: str,
                                               tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=says):
        check_config(tmp_path, reranker)
