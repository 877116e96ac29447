"""The export step of `attnserve pull` (attnserve/pull.py) for a checkpoint: downloaded in two parts beside the
bundle it makes, its small files first, so that model.load.check_config refuses an architecture attnserve does not
load before a weight is fetched; then its weights; then export.bundle.export_bundle builds the bundle beside its place
and renames it in once gated and verified. The downloaded files are removed once the bundle is in place, and kept
after a failure, so a retry fetches only what is missing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from hub import remote
from hub.cache import download_dir
from hub.fetch import checkpoint_files
from hub.models import Source
from hub.options import Wanted


def export_source(source: Source, wanted: Wanted, target: Path) -> None:
    """The export step: `source` exported to the bundle at `target`; a snapshot's downloaded files are removed once
    the bundle is in place."""
    snapshot = source.snapshot
    directory = download_checkpoint(snapshot, target, wanted.reranker) if snapshot else source.directory
    assert directory is not None  # a Source is a snapshot or a directory
    from export.bundle import export_bundle  # torch

    export_bundle(directory, target, wanted.variants, name=snapshot.repo if snapshot else None,
                  version=snapshot.commit if snapshot else "1", reranker=wanted.reranker)
    if snapshot is not None:
        shutil.rmtree(directory, ignore_errors=True)


def download_checkpoint(snapshot: remote.Snapshot, target: Path, reranker: str | None) -> Path:
    """The checkpoint's files beside `target`: its small files, checked (model.load.check_config), then its weights."""
    downloads = download_dir(target)
    small, weights = checkpoint_files(snapshot.files)
    remote.download(snapshot, small, downloads)
    from model.load import check_config  # torch, once the files that can refuse the model are here

    check_config(downloads, reranker)
    remote.download(snapshot, weights, downloads)
    return downloads
