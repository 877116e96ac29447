"""The corpus job on bundles of other families (tests/helpers/exports.py): a sentence-transformers MPNet model
with prompts, through the CLI with --prompt-name (whole and chunked), a Qwen3-Embedding-style decoder with its
instruction prompt, and a one-label XLM-RoBERTa scorer with --classify: the rows are what the server answers for
the same texts, bit for bit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from jobs.cli import main
from tests.helpers.exports import Exported
from tests.helpers.serving import serving
from tests.helpers.tokenizers import MULTILINGUAL
from tests.jobs.corpus import output, vectors, write

DOCS = [*MULTILINGUAL, " ".join(MULTILINGUAL)]  # the last is several windows of a 20-token model


def _job(bundle: Path, tmp_path: Path, name: str, *flags: str) -> Any:
    path = write(tmp_path / "docs.jsonl", [{"id": f"d{i:02d}", "text": t} for i, t in enumerate(DOCS)])
    argv = [str(path), "--bundle", str(bundle), "--out", str(tmp_path / name), "--id-column", "id",
            "--intra-op-threads", "1", *flags]
    assert main(argv) == 0
    return output(tmp_path / name)


async def test_prompted_vectors_equal_the_servers(family_export: Callable[[str], Exported], tmp_path: Path,
                                                  capsys) -> None:
    bundle = family_export("mpnet-sentence").bundle
    default = _job(bundle, tmp_path, "default", "--token-count")
    document = _job(bundle, tmp_path, "document", "--prompt-name", "document", "--token-count")
    chunked = _job(bundle, tmp_path, "chunked", "--prompt-name", "document", "--chunking", "mean",
                   "--chunk-overlap", "2")
    async with serving(bundle, intra_op_threads=1) as (_, client):
        served_default = (await client.post("/embed", json={"inputs": DOCS})).json()
        served = (await client.post("/v1/embeddings", json={"input": DOCS, "input_type": "document"})).json()
        served_chunked = (await client.post("/embed", json={"inputs": DOCS, "prompt_name": "document",
                                                            "chunking": "mean", "chunk_overlap": 2})).json()
    assert np.array_equal(vectors(default), np.asarray(served_default, dtype=np.float32))
    assert np.array_equal(vectors(document), np.asarray([d["embedding"] for d in served["data"]], dtype=np.float32))
    assert np.array_equal(vectors(chunked), np.asarray(served_chunked, dtype=np.float32)), served_chunked
    assert sum(document.column("tokens").to_pylist()) == served["usage"]["prompt_tokens"]  # the prompt's counted
    assert main([str(tmp_path / "docs.jsonl"), "--bundle", str(bundle), "--out", str(tmp_path / "bad"),
                 "--prompt-name", "passage"]) == 2
    assert "--prompt-name: prompt_name 'passage' is not one of this model's prompts" in capsys.readouterr().err


async def test_a_one_label_scorer_writes_sigmoid_scores(family_export: Callable[[str], Exported],
                                                       tmp_path: Path) -> None:
    bundle = family_export("xlm-roberta-scorer").bundle
    table = _job(bundle, tmp_path, "scored", "--classify", "--no-normalize")
    async with serving(bundle, intra_op_threads=1) as (_, client):
        embedded = (await client.post("/embed", json={"inputs": DOCS, "normalize": False})).json()
        classified = (await client.post("/classify", json={"inputs": DOCS})).json()
    assert np.array_equal(vectors(table), np.asarray(embedded, dtype=np.float32))
    np.testing.assert_allclose(vectors(table, "scores")[:, 0], [c[0]["score"] for c in classified], rtol=1e-6)
    assert set(table.column("label").to_pylist()) == {"relevant"}


async def test_a_decoder_embedder_writes_the_servers_vectors(family_export: Callable[[str], Exported],
                                                             tmp_path: Path) -> None:
    """Qwen3-Embedding-style: last-token pooling (the server pads on the right, so the last real token is each
    text's own), its query instruction by --prompt-name, whole and chunked."""
    bundle = family_export("qwen3-sentence").bundle
    queries = _job(bundle, tmp_path, "queries", "--prompt-name", "query")
    chunked = _job(bundle, tmp_path, "chunked", "--chunking", "mean", "--chunk-overlap", "4")
    async with serving(bundle, intra_op_threads=1) as (_, client):
        served = (await client.post("/v1/embeddings", json={"input": DOCS, "input_type": "query"})).json()
        served_chunked = (await client.post("/embed", json={"inputs": DOCS, "chunking": "mean",
                                                            "chunk_overlap": 4})).json()
    assert np.array_equal(vectors(queries), np.asarray([d["embedding"] for d in served["data"]], dtype=np.float32))
    assert np.array_equal(vectors(chunked), np.asarray(served_chunked, dtype=np.float32)), served_chunked
