"""`attnserve serve --model` and `attnserve pull` against a hub on loopback (tests.helpers.hub), as a user runs them:
a first start downloads (through a cut connection, resumed), exports in a subprocess and serves the reference's
vectors; later starts come from the bundle cache with no hub and no torch; pinned revisions, a repository that moved
on, `pull --out`, and a repository that holds a bundle.

One random-weight BERT repository, org/tiny, with two commits (the second published by the moving-on test, so the
tests run in this order): its weights span more than huggingface_hub's 10 MiB download chunk (a padded vocabulary),
so a download cut past the first chunk resumes with a Range request. Three exports in all (commit 1 into the cache,
commit 2 into the cache, commit 1 at --out), the rest served from the cache.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from bench.procs import Server, launch, terminate, wait_ready
from bundle.manifest import SCHEMA_VERSION
from bundle.verify import verify_bundle
from tests.helpers.hub import FakeHub, hub_env, torch_blocked

pytestmark = pytest.mark.slow
REPO = "org/tiny"
TEXTS = ["a warm and funny film", "Café crème à Zürich", "the plot makes no sense at all, none"]
VOCABULARY = 90_000  # 11.5 MB of token embeddings: more than one 10 MiB download chunk
CHUNK = 10 * 1024 * 1024  # huggingface_hub's constants.DOWNLOAD_CHUNK_SIZE


def save_bert(directory: Path, seed: int) -> np.ndarray:
    """A random BertModel at `directory`; its [CLS] states of TEXTS (what attnserve embeds it as), the reference."""
    import torch
    import transformers

    from tests.helpers.families import hf_config, reference, save_random, tokenizer_for

    tokenizer = tokenizer_for("bert")
    save_random(directory, transformers.BertModel, hf_config("bert", "small", VOCABULARY), tokenizer, seed)
    model, encoded = reference(directory, "bert", "Model"), tokenizer.encode_batch(TEXTS)
    rows = [torch.tensor([e.ids]) for e in encoded]
    with torch.no_grad():
        return np.stack([model(input_ids=ids).last_hidden_state[0, 0].numpy() for ids in rows])


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    fake = FakeHub()
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("by-name")


@pytest.fixture(scope="module")
def commits(work: Path) -> dict[str, tuple[Path, np.ndarray]]:
    """The two commits' directories and reference vectors."""
    return {name: (work / name, save_bert(work / name, seed)) for name, seed in (("first", 0), ("second", 1))}


def serve(work: Path, env: dict[str, str], *models: str, ready_s: float = 300.0) -> Server:
    """`attnserve serve --model ...` on the cache under `work`, ready (the log in the failure otherwise)."""
    argv = [sys.executable, "-m", "attnserve", "serve", *(f"--model={m}" for m in models), "--variants", "fp32",
            "--cache-dir", str(work / "cache"), "--intra-op-threads", "1", "--port", "{port}"]
    server = launch("attnserve", argv, work / f"serve-{len(list(work.glob('serve-*')))}.log", env)
    if not wait_ready(server, ready_s):
        status = terminate(server)
        pytest.fail(f"not ready (exit status {status}):\n{server.log()}")
    return server


def embeddings(server: Server, model: str) -> np.ndarray:
    response = httpx.post(server.url + "/v1/embeddings", json={"input": TEXTS, "model": model}, timeout=60)
    assert response.status_code == 200, response.text
    return np.array([row["embedding"] for row in response.json()["data"]])


def pull(work: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "attnserve", "pull", *args, "--variants", "fp32", "--cache-dir", str(work / "cache")]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)


def assert_near(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and float(np.abs(got - want).max()) <= 1e-5


def test_first_start_downloads_through_a_cut_exports_and_serves_the_reference(hub, work, commits):
    directory, reference = commits["first"]
    sha = hub.publish(REPO, directory, refs=("main", "stable"))
    hub.cut_once(REPO, "model.safetensors", after=CHUNK + 4096)
    server = serve(work, hub_env(hub, work), REPO)
    try:
        assert_near(embeddings(server, REPO), reference)
        assert httpx.get(server.url + "/v1/models").json()["data"][0]["id"] == REPO
    finally:
        assert terminate(server) == 0
    weights = [a for a in hub.asked if a.method == "GET" and a.path.endswith("/model.safetensors")]
    assert [a.headers.get("range") for a in weights] == [None, f"bytes={CHUNK}-"]  # cut, then resumed
    files = [a.path.rpartition("/")[2] for a in hub.asked if a.method == "GET" and "/resolve/" in a.path]
    assert files.index("config.json") < files.index("model.safetensors")  # the architecture is read first
    assert "downloading model.safetensors of org/tiny@" in server.log()  # no terminal: a line per file, no bars
    assert server.log().count("Trying to resume download") == 1  # huggingface_hub's warning, once, in our format
    place = work / "cache" / "models" / "org--tiny"
    assert verify_bundle(place / sha / f"schema{SCHEMA_VERSION}-fp32").name == REPO
    assert (place / "refs" / "main").read_text().strip() == sha
    # no download or staging left
    assert [p.name for p in (place / sha).glob(".*")] == [f".schema{SCHEMA_VERSION}-fp32.lock"]


@pytest.mark.parametrize("hub_down", ["offline", "stopped"])
def test_a_second_start_needs_no_hub_and_no_torch(hub, work, commits, hub_down):
    blocked, mark = torch_blocked(work)
    env = hub_env(hub, work, **blocked, **({"HF_HUB_OFFLINE": "1"} if hub_down == "offline" else {}))
    asked = len(hub.asked)
    if hub_down == "stopped":
        hub.stop()
    try:
        server = serve(work, env, REPO, ready_s=60)
        try:
            assert_near(embeddings(server, REPO), commits["first"][1])
        finally:
            assert terminate(server) == 0
    finally:
        if hub_down == "stopped":
            hub.start()
    assert not mark.exists() and len(hub.asked) == asked
    assert "as when it was last served" in server.log()


def test_pinned_revisions_are_served_from_the_cache(hub, work, commits):
    sha, asked = hub.repos[REPO].refs["main"], len(hub.asked)
    blocked, mark = torch_blocked(work)
    server = serve(work, hub_env(hub, work, **blocked), f"old={REPO}@{sha}", f"stable={REPO}@stable", ready_s=60)
    try:
        for name in ("old", "stable"):
            assert_near(embeddings(server, name), commits["first"][1])
    finally:
        assert terminate(server) == 0
    assert not mark.exists()
    assert [p for p in hub.paths(asked) if "/api/models/" in p] == [f"/api/models/{REPO}/revision/stable"]
    assert not [p for p in hub.paths(asked) if "/resolve/" in p]  # nothing downloaded


def test_a_repository_that_moved_on_gets_a_new_bundle_beside_the_pinned_one(hub, work, commits):
    first = hub.repos[REPO].refs["main"]
    second = hub.publish(REPO, commits["second"][0], refs=("main",))
    filled = pull(work, hub_env(hub, work), REPO)  # attnserve pull without --out fills the cache
    assert filled.returncode == 0, filled.stderr
    shape = f"schema{SCHEMA_VERSION}-fp32"
    assert filled.stdout.strip() == str(work / "cache" / "models" / "org--tiny" / second / shape)
    blocked, mark = torch_blocked(work)
    server = serve(work, hub_env(hub, work, **blocked), f"tiny={REPO}", f"pinned={REPO}@{first}", ready_s=60)
    try:
        assert_near(embeddings(server, "tiny"), commits["second"][1])
        assert_near(embeddings(server, "pinned"), commits["first"][1])
    finally:
        assert terminate(server) == 0
    assert not mark.exists()


def test_pull_out_and_a_repository_that_holds_the_bundle(hub, work, commits):
    out = work / "out" / "tiny"
    made = pull(work, hub_env(hub, work), f"{REPO}@stable", "--out", str(out))
    assert made.returncode == 0, made.stderr
    manifest = verify_bundle(out)
    assert (manifest.name, manifest.version) == (REPO, hub.repos[REPO].refs["stable"])
    assert not list(out.parent.glob(".*"))  # no download or staging directory beside it
    sha = hub.publish("org/tiny-bundle", out)
    before = len(hub.asked)
    blocked, mark = torch_blocked(work)
    server = serve(work, hub_env(hub, work, **blocked), "hubbed=org/tiny-bundle", str(out), ready_s=60)
    try:  # the repository's bundle, and the directory served as it is, under its own name
        assert_near(embeddings(server, "hubbed"), commits["first"][1])
        assert_near(embeddings(server, "tiny"), commits["first"][1])
    finally:
        assert terminate(server) == 0
    assert not mark.exists()
    fetched = [a.path.rpartition("/")[2] for a in hub.asked[before:] if a.method == "GET" and "/resolve/" in a.path]
    data = {name for g in manifest.graphs for name in g.data_files}  # the fp32 graphs' shared weights, asked for once
    assert sorted(fetched) == sorted({"manifest.json", "tokenizer.json", *(g.file for g in manifest.graphs), *data})
    assert verify_bundle(work / "cache" / "models" / "org--tiny-bundle" / sha / "bundle").name == REPO
