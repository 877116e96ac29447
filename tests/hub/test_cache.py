"""hub/'s pieces on their own, in this process, with no hub: a model's name as the command line gives it, the bundle
cache's layout and keys, which of a repository's files are fetched and in what order, the options `serve --model`
and `pull` share (variants, reranker recipes), and the one line a full disk gets."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from bundle.manifest import SCHEMA_VERSION
from hub.cache import BundleCache, default_root, download_dir, shape_key
from hub.errors import Refused, disk_refusal
from hub.fetch import checkpoint_files
from hub.names import ModelName
from hub.options import HubOptions
from service.settings import Settings

SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(("text", "name", "revision", "alias"), [
    ("BAAI/bge-m3", "BAAI/bge-m3", None, None),
    ("e5=intfloat/e5-small@v1.0", "intfloat/e5-small", "v1.0", "e5"),
    (f"org/m@{SHA}", "org/m", SHA, None),
    ("org/m@refs/pr/4", "org/m", "refs/pr/4", None),
    ("/data/run=3/model", "/data/run=3/model", None, None),  # a `=` after a slash belongs to NAME
])
def test_a_name_is_alias_name_and_revision(text: str, name: str, revision: str | None, alias: str | None) -> None:
    parsed = ModelName.parse(text)
    assert (parsed.name, parsed.revision, parsed.alias) == (name, revision, alias)
    assert parsed.served_name == (alias or name)
    assert parsed.pinned == (revision == SHA)


@pytest.mark.parametrize("text", ["=org/m", "org/m@", "a=", "@main", "org/m@.."])
def test_an_empty_part_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="expected"):
        ModelName.parse(text)


def test_a_directory_is_local_and_served_under_its_own_name(tmp_path: Path) -> None:
    (tmp_path / "my-model").mkdir()
    local = ModelName.parse(str(tmp_path / "my-model"))
    assert local.directory == tmp_path / "my-model" and local.served_name == "my-model"
    assert ModelName.parse(f"{tmp_path / 'my-model'}@main").directory is None  # a revision: a hub name
    for bad in ("a/b/c", "../up", "has space/x"):
        with pytest.raises(Refused, match="neither a directory here nor a hub repository id"):
            ModelName.parse(bad).checked_repo()


def test_the_cache_layout_and_key(tmp_path: Path) -> None:
    cache = BundleCache.at(tmp_path)
    shape = shape_key(("fp32", "fp32-opt"), "qwen3")
    assert shape == f"schema{SCHEMA_VERSION}-fp32+fp32-opt-reranker-qwen3"
    exported = cache.bundle_dir("BAAI/bge-m3", SHA, shape)
    assert exported == tmp_path / "models" / "BAAI--bge-m3" / SHA / shape
    assert download_dir(exported) == exported.parent / f".{shape}.download"
    assert cache.find("BAAI/bge-m3", SHA, shape) is None
    for found in (exported, cache.bundle_dir("BAAI/bge-m3", SHA, "bundle")):  # the repository's own bundle first
        found.mkdir(parents=True)
        (found / "manifest.json").write_text("{}")
        assert cache.find("BAAI/bge-m3", SHA, shape) == found


def test_revisions_are_recorded_by_repository(tmp_path: Path) -> None:
    cache = BundleCache.at(tmp_path)
    assert cache.recorded("org/m", "refs/pr/4") is None
    cache.record("org/m", "refs/pr/4", SHA)
    assert cache.recorded("org/m", "refs/pr/4") == SHA and cache.recorded("org/other", "refs/pr/4") is None
    assert [p.name for p in (tmp_path / "models" / "org--m" / "refs").iterdir()] == ["refs%2Fpr%2F4"]


def test_a_local_directory_is_keyed_by_its_files(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    cache = BundleCache.at(tmp_path / "cache")
    before = cache.local_dir(tmp_path / "model", "s")
    assert before.parent.parent.name.startswith("model-") and before == cache.local_dir(tmp_path / "model", "s")
    (tmp_path / "model" / "config.json").write_text('{"changed": 1}')
    assert cache.local_dir(tmp_path / "model", "s") != before


def test_the_default_root_is_the_user_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    assert default_root() == Path("/somewhere/attnserve") and BundleCache.at(None).root == default_root()
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_root() == Path.home() / ".cache" / "attnserve"


def test_a_checkpoint_is_fetched_small_files_first_without_other_formats() -> None:
    files = ("config.json", "tokenizer.json", "modules.json", "1_Pooling/config.json", "model.safetensors",
             "pytorch_model.bin", "2_Dense/pytorch_model.bin", "colbert_linear.pt", "onnx/model.onnx",
             "openvino/openvino_model.xml", "tf_model.h5", "flax_model.msgpack", "model.gguf", ".gitattributes",
             "README.md")
    small, weights = checkpoint_files(files)
    assert small == ["config.json", "tokenizer.json", "modules.json", "1_Pooling/config.json", "README.md"]
    assert weights == ["model.safetensors", "2_Dense/pytorch_model.bin", "colbert_linear.pt"]  # .bin beside it: not
    assert checkpoint_files(("config.json", "pytorch_model.bin"))[1] == ["pytorch_model.bin"]


def test_variants_are_the_exports_and_part_of_the_key() -> None:
    assert HubOptions().variants == ["fp32", "fp32-opt"]
    assert HubOptions(variants="int8, fp32-opt").variants == ["fp32", "fp32-opt", "int8"]
    with pytest.raises(ValueError, match="unknown variant"):
        HubOptions(variants="fp64")
    name = ModelName.parse("org/m")
    assert HubOptions(variants="fp32").wanted(name, 1).shape != HubOptions().wanted(name, 1).shape


def test_a_reranker_recipe_names_its_model() -> None:
    one, e5, rerank = ModelName.parse("org/r"), ModelName.parse("e5=org/e5"), ModelName.parse("r=org/rerank")
    assert HubOptions(reranker="qwen3").wanted(one, 1).reranker == "qwen3"
    options = HubOptions(reranker=["r=qwen3"])
    assert (options.wanted(e5, 2).reranker, options.wanted(rerank, 2).reranker) == (None, "qwen3")
    with pytest.raises(ValueError, match="no named model is served as 'x'"):
        HubOptions(reranker="x=qwen3").check_rerankers(["e5", "r"])
    with pytest.raises(ValueError, match="say which as NAME=RECIPE"):
        HubOptions(reranker="qwen3").check_rerankers(["e5", "r"])


def test_models_by_name_are_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ATTNSERVE_MODEL", "m3=BAAI/bge-m3, rerank=Qwen/Qwen3-Reranker-0.6B@main")
    monkeypatch.setenv("ATTNSERVE_RERANKER", "rerank=qwen3")
    settings = Settings(cache_dir=tmp_path, export=False)
    assert [(m.served_name, str(m)) for m in settings.model] == [("m3", "BAAI/bge-m3"),
                                                                 ("rerank", "Qwen/Qwen3-Reranker-0.6B@main")]
    assert settings.cache().root == tmp_path and settings.wanted(settings.model[1], 2).reranker == "qwen3"
    with pytest.raises(ValueError, match="'BAAI/bge-m3': beside other models it needs a name that fits in a URL"):
        Settings(model="BAAI/bge-m3", bundle=str(tmp_path))  # beside a bundle: a name for /v2/models/NAME
    with pytest.raises(ValueError, match="'bad name' is not a model name"):
        Settings(model="bad name=org/m")


def test_a_full_disk_is_one_line(tmp_path: Path) -> None:
    full = disk_refusal(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "x")), tmp_path)
    assert str(full) == f"no space left on the device that holds {tmp_path}"
    denied = disk_refusal(PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "x")), tmp_path)
    assert str(denied) == f"cannot write under {tmp_path}: Permission denied ({tmp_path / 'x'})"
