"""Session fixtures shared by every test package (registered in tests/conftest.py via pytest_plugins).

    tiny_checkpoint   a seeded tiny attnserve checkpoint (tests.helpers.tiny; linear head, labels neg/pos)
    tiny_bundle       its fp32 bundle (fast + attention graphs), name "tiny", version "7": exported once
    tiny_hf_dir       a seeded transformers BertForSequenceClassification saved with save_pretrained
    tiny_hf_bundle    its fp32 bundle
    small_bundle      a wider, deeper, 128-token model whose graph time dominates (the traffic checks)
    medium_bundle     wider still: a text costs about what it costs a real encoder (the cache checks)
    live_server       a real server process on tiny_bundle, for the whole session; its base URL
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.process import launch_server, stop, wait_ready
from tests.helpers.tiny import make_tiny_checkpoint, make_tiny_hf_bert


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny")


def _exported(source: Path, factory: pytest.TempPathFactory, folder: str, **options: str) -> Path:
    """`source` exported (fp32) to a fresh bundle directory called `folder`."""
    from export.bundle import export_bundle

    out = factory.mktemp("bundles") / folder
    export_bundle(source, out, **options)
    return out


@pytest.fixture(scope="session")
def tiny_bundle(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _exported(tiny_checkpoint, tmp_path_factory, "tiny", name="tiny", version="7")


@pytest.fixture(scope="session")
def small_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    checkpoint = make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "small", size="small")
    return _exported(checkpoint, tmp_path_factory, "small", name="small", version="1")


@pytest.fixture(scope="session")
def medium_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    checkpoint = make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "medium", size="medium")
    return _exported(checkpoint, tmp_path_factory, "medium", name="medium", version="1")


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_hf_bert(tmp_path_factory.mktemp("hf") / "tiny-bert")


@pytest.fixture(scope="session")
def tiny_hf_bundle(tiny_hf_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _exported(tiny_hf_dir, tmp_path_factory, "tiny-bert")


@pytest.fixture(scope="session")
def live_server(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `python -m attnserve serve` on 127.0.0.1 (uvicorn, httptools) on the tiny bundle; its base URL."""
    server = launch_server(tiny_bundle, tmp_path_factory.mktemp("live") / "server.log")
    if not wait_ready(server, 60):
        _, log = stop(server)
        pytest.fail(f"server did not become ready:\n{log}")
    yield server.url
    status, log = stop(server)
    assert status == 0, log
