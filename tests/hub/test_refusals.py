"""What `attnserve serve --model` and `attnserve pull` refuse, each in one line on stderr with exit status 2 and no
traceback, before anything is served or kept: an unknown repository or revision, a gated repository without a token,
an architecture attnserve does not load (refused before any weight is fetched), a bundle this attnserve does not read,
an unwritable cache (a file in its path, a read-only file system), a full disk (a small tmpfs: while downloading a
bundle, and while exporting one; what was written is never a bundle, and a retry with room finishes it), --no-export
or HF_HUB_OFFLINE=1 with nothing cached. The repositories hold a real config.json and tokenizer.json beside weights
that are never read, so nothing here exports but the full-disk export, from a real checkpoint (marked slow). The
file systems are mounted as root; elsewhere those tests skip."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bundle.verify import verify_bundle
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


@contextlib.contextmanager
def tmpfs(where: Path, size: int, *options: str) -> Iterator[Path]:
    """A tmpfs of `size` bytes mounted at `where` (made) for the block: a small disk that really fills, or with
    "ro" one that cannot be written. Skips the test where this process may not mount (not root)."""
    where.mkdir(parents=True, exist_ok=True)
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join((f"size={size}", *options)), "tmpfs", str(where)],
                           capture_output=True, text=True, check=False)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "--lazy", str(where)], check=True)


def grow(where: Path, size: int) -> None:
    """The tmpfs at `where` remounted with room for `size` bytes, its files kept: the disk freed."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(where)], check=True)


def bundles_in(cache: Path) -> list[Path]:
    """The bundles a cache holds: manifest.json outside hidden (download, staging) directories."""
    return [p for p in cache.rglob("manifest.json") if not any(d.startswith(".") for d in p.relative_to(cache).parts)]


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


SERVE, PULL = ("serve", "--model"), ("pull",)


@pytest.mark.parametrize("command", [SERVE, PULL], ids=["serve", "pull"])
@pytest.mark.parametrize(("model", "says"), [
    ("org/nothing", "no model repository org/nothing on http://127.0.0.1:"),
    ("org/model@v9", "org/model has no revision v9"),
    ("org/gated", "org/gated is gated: accept its conditions on the hub, then set HF_TOKEN"),
    ("org/broken", "its manifest.json is not a manifest this attnserve reads"),
])
def test_the_hub_refusals_are_one_line(hub, tmp_path, command, model, says):
    assert_refused(attnserve(hub, tmp_path, *command, model), says)
    assert not bundles_in(tmp_path / "cache")  # only a hidden download directory, never a bundle


@pytest.mark.parametrize("command", [SERVE, PULL], ids=["serve", "pull"])
@pytest.mark.parametrize(("model", "says"), [
    ("org/t5", "model_type 't5' is not supported; supported model types: bert"),
    ("org/qa", "architecture 'BertForQuestionAnswering' is not supported; supported: BertModel"),
])
def test_an_architecture_is_refused_before_any_weight_is_fetched(hub, tmp_path, command, model, says):
    asked = len(hub.asked)
    assert_refused(attnserve(hub, tmp_path, *command, model), says)  # serve: the export step's own line, once
    fetched = [path for path in hub.paths(asked) if "/resolve/" in path]
    assert fetched and not [path for path in fetched if path.endswith(".safetensors")], fetched


@pytest.mark.parametrize("command", [SERVE, PULL], ids=["serve", "pull"])
def test_an_unwritable_cache_is_refused_before_any_download(hub, tmp_path, command):
    (tmp_path / "a-file").write_text("")
    asked = len(hub.asked)
    result = attnserve(hub, tmp_path, *command, "org/model", "--cache-dir", str(tmp_path / "a-file" / "c"))
    assert "a-file/c: Not a directory" in assert_refused(result, "cannot write under")
    assert not [path for path in hub.paths(asked) if "/resolve/" in path]


def test_a_read_only_cache_is_refused_before_any_download(hub, tmp_path):
    with tmpfs(tmp_path / "read-only", 1 << 20, "ro") as volume:
        asked = len(hub.asked)
        result = attnserve(hub, tmp_path, "serve", "--model", "org/model", "--cache-dir", str(volume / "c"))
        assert "read-only/c: Read-only file system" in assert_refused(result, "cannot write under")
    assert not [path for path in hub.paths(asked) if "/resolve/" in path]


@pytest.fixture(scope="module")
def bundle_repository(hub: FakeHub, tiny_bundle: Path) -> int:
    """org/bundle: a repository that holds the tiny bundle (fetched with no torch); its largest file's size."""
    hub.publish("org/bundle", tiny_bundle)
    return max(path.stat().st_size for path in tiny_bundle.iterdir())


def test_a_full_disk_while_downloading_keeps_no_bundle_and_a_retry_with_room_finishes(hub, tmp_path,
                                                                                     bundle_repository):
    room = 256 * 1024  # the manifest and tokenizer fit, the largest graph does not
    assert bundle_repository > room
    with tmpfs(tmp_path / "small-disk", room) as disk:
        cache = disk / "cache"
        for command in (SERVE, PULL):
            result = attnserve(hub, tmp_path, *command, "org/bundle", "--cache-dir", str(cache))
            line = assert_refused(result, "no space left on the device that holds")
            assert str(cache) in line and "UserWarning" not in result.stderr
            assert not bundles_in(cache)  # the partial download is hidden, never served
        grow(disk, 8 << 20)
        pulled = attnserve(hub, tmp_path, *PULL, "org/bundle", "--cache-dir", str(cache))
        assert pulled.returncode == 0, pulled.stderr
        assert bundles_in(cache) == [Path(pulled.stdout.strip()) / "manifest.json"]
        assert verify_bundle(Path(pulled.stdout.strip())).name == "tiny"


@pytest.mark.slow  # one export (torch), which the full disk stops
def test_a_full_disk_while_exporting_keeps_no_bundle(hub, tmp_path, tiny_hf_dir):
    hub.publish("org/tiny-bert", tiny_hf_dir)
    downloads = sum(-(-path.stat().st_size // 4096) * 4096 for path in tiny_hf_dir.iterdir())
    with tmpfs(tmp_path / "small-disk", downloads + 64 * 1024) as disk:  # the checkpoint fits, its graphs do not
        cache = disk / "cache"
        result = attnserve(hub, tmp_path, *SERVE, "org/tiny-bert", "--variants", "fp32", "--cache-dir", str(cache))
        assert str(cache) in assert_refused(result, "no space left on the device that holds")
        assert "model.safetensors" in {path.name for path in cache.rglob("*")}  # downloaded, kept for a retry
        assert not bundles_in(cache) and not list(cache.rglob("*.onnx"))


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
