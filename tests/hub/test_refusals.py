"""What `attnserve serve --model` and `attnserve pull` refuse, each in one line on stderr with exit status 2 and no
traceback, before anything is served or kept: an unknown repository or revision, a gated repository without a token,
an architecture attnserve does not load (refused before any weight is fetched), a bundle this attnserve does not read,
an unwritable cache, --no-export or HF_HUB_OFFLINE=1 with nothing cached. The repositories hold a real config.json
and tokenizer.json beside weights that are never read, so nothing here exports."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.hub import FakeHub, hub_env
from tests.helpers.tokenizers import wordpiece

BERT = {"model_type": "bert", "architectures": ["BertModel"], "vocab_size": 120, "hidden_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64}


def repository(directory: Path, **config: object) -> Path:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({**BERT, **config}))
    wordpiece().save(str(directory / "tokenizer.json"))
    (directory / "model.safetensors").write_bytes(b"never read")
    return directory


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeHub]:
    root, fake = tmp_path_factory.mktemp("repositories"), FakeHub()
    fake.publish("org/model", repository(root / "model"))
    fake.publish("org/gated", repository(root / "gated"), gated=True)
    fake.publish("org/t5", repository(root / "t5", model_type="t5", architectures=["T5EncoderModel"]))
    fake.publish("org/qa", repository(root / "qa", architectures=["BertForQuestionAnswering"]))
    (root / "broken").mkdir()
    (root / "broken" / "manifest.json").write_text('{"schema_version": 99}')
    fake.publish("org/broken", root / "broken")
    fake.start()
    yield fake
    fake.stop()


def attnserve(hub: FakeHub, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`attnserve ARGS --port 0` (serve) on a cache under `tmp_path` unless ARGS name one."""
    cache = [] if "--cache-dir" in args else ["--cache-dir", str(tmp_path / "cache")]
    port = ["--port", "0"] if args[0] == "serve" else []
    return subprocess.run([sys.executable, "-m", "attnserve", *args, *cache, *port], env=hub_env(hub, tmp_path, **env),
                          capture_output=True, text=True, timeout=120, check=False)


def assert_refused(result: subprocess.CompletedProcess[str], says: str) -> str:
    """Exit status 2, no traceback, and exactly one line of stderr saying `says`; that line."""
    lines = [line for line in result.stderr.splitlines() if says in line]
    assert result.returncode == 2 and "Traceback" not in result.stderr and len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(("model", "says"), [
    ("org/nothing", "no model repository org/nothing on http://127.0.0.1:"),
    ("org/model@v9", "org/model has no revision v9"),
    ("org/gated", "org/gated is gated: accept its conditions on the hub, then set HF_TOKEN"),
    ("org/broken", "its manifest.json is not a manifest this attnserve reads"),
])
def test_the_hub_refusals_are_one_line(hub, tmp_path, model, says):
    assert_refused(attnserve(hub, tmp_path, "serve", "--model", model), says)
    cache = tmp_path / "cache"
    kept = [p for p in cache.rglob("manifest.json") if not any(d.startswith(".") for d in p.relative_to(cache).parts)]
    assert not kept  # only a hidden download directory, never a bundle


@pytest.mark.parametrize(("model", "says"), [
    ("org/t5", "model_type 't5' is not supported; supported model types: bert"),
    ("org/qa", "architecture 'BertForQuestionAnswering' is not supported; supported: BertModel"),
])
def test_an_architecture_is_refused_before_any_weight_is_fetched(hub, tmp_path, model, says):
    asked = len(hub.asked)
    assert_refused(attnserve(hub, tmp_path, "pull", model), says)
    fetched = [path for path in hub.paths(asked) if "/resolve/" in path]
    assert fetched and not [path for path in fetched if path.endswith(".safetensors")], fetched


def test_an_unwritable_cache_is_refused_before_any_download(hub, tmp_path):
    (tmp_path / "a-file").write_text("")
    asked = len(hub.asked)
    result = attnserve(hub, tmp_path, "serve", "--model", "org/model", "--cache-dir", str(tmp_path / "a-file" / "c"))
    assert "a-file/c: Not a directory" in assert_refused(result, "cannot write under")
    assert not [path for path in hub.paths(asked) if "/resolve/" in path]


@pytest.mark.parametrize(("flags", "env", "says"), [
    (["--no-export"], {}, "holds no bundle of org/model (commit "),
    ([], {"HF_HUB_OFFLINE": "1"}, "may not be asked (HF_HUB_OFFLINE is set), and org/model@main was never served"),
])
def test_nothing_cached_where_nothing_may_be_fetched(hub, tmp_path, flags, env, says):
    assert_refused(attnserve(hub, tmp_path, "serve", "--model", "org/model", *flags, **env), says)


def test_a_local_checkpoint_is_not_exported_under_no_export(hub, tmp_path):
    local = repository(tmp_path / "local-model")
    result = attnserve(hub, tmp_path, "serve", "--model", str(local), "--no-export")
    assert_refused(result, f"holds no bundle of {local} as it is now, as --no-export needs")


def test_pull_out_replaces_a_bundle_and_nothing_else(hub, tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    result = attnserve(hub, tmp_path, "pull", "org/model", "--out", str(tmp_path / "notes"))
    assert_refused(result, "notes exists and is not a bundle; refusing to replace it")
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine"


def test_pull_takes_no_alias_and_a_reranker_names_a_model(hub, tmp_path):
    assert_refused(attnserve(hub, tmp_path, "pull", "m=org/model"), "attnserve pull takes NAME[@REVISION]")
    result = attnserve(hub, tmp_path, "serve", "--model", "a=org/model,b=org/model", "--reranker", "qwen3")
    assert_refused(result, "reranker 'qwen3': with 2 named models, say which as NAME=RECIPE")
