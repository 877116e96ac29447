"""The real EmbeddingGemma-300m (24 Gemma3 layers x 768, bidirectional, sliding windows of 512 in 5 layers of 6, one
key/value head for 3 query heads, mean pooling, Dense 768 -> 3072 -> 768, Normalize; tests/helpers/embeddinggemma.py)
loads in our PyTorch encoder equal to sentence-transformers, exports with the default variants and gates
(export.bundle.export_bundle: fast fp32 and fp32-opt, attention fp32), and its bundle, served over HTTP (through the
torch-free inference core), gives every text sentence-transformers' `encode(texts, prompt_name=...)` vector at cosine
>= 0.99999, by `input_type` on /v1/embeddings and `prompt_name` on /embed, through either variant; the model card's
query-against-documents similarities come out as sentence-transformers computes them, to 1e-5.

The export takes minutes on 2 cores, so the module is `heavy` (make reliability, after make install-gemma); it
exports once, in a module-scoped fixture, after the PyTorch check.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch

from bundle.manifest import Manifest
from export.bundle import export_bundle
from model.load import load_model
from model.tokenizer import encode
from tests.helpers.embeddinggemma import embeddinggemma_dir
from tests.helpers.sentence import load_reference
from tests.helpers.serving import post_ok, uvicorn_here
from tests.helpers.tokenizers import MULTILINGUAL

pytestmark = pytest.mark.heavy
COSINE = 0.99999
# Latin, Cyrillic, CJK, emoji and white space; a short one; one of 600 tokens, past the local layers' 512-token window
# (one cut at 2,048 would pad the batch to it: minutes on 2 cores for each encode).
TEXTS = [*MULTILINGUAL[:2], MULTILINGUAL[4], MULTILINGUAL[7], MULTILINGUAL[9], "ok", " ".join(MULTILINGUAL[8:9] * 40)]
PROMPTS = ("query", "document", "STS")  # input_type's two, and one only prompt_name reaches
# The model card's example: one query against four documents (encode_query, encode_document, similarity).
QUERY = "Which planet is known as the Red Planet?"
DOCUMENTS = [
    "Venus is often called Earth's twin because of its similar size and proximity.",
    "Mars, known for its reddish appearance, is often referred to as the Red Planet.",
    "Jupiter, the largest planet in our solar system, has a prominent red spot.",
    "Saturn, famous for its rings, is sometimes mistaken for the Red Planet.",
]


def cosines(got: Any, expected: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two (N, D) arrays."""
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    return (got * expected).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(expected, axis=-1)


@dataclass
class Reference:
    """What sentence-transformers' own model of the directory says: TEXTS' vectors by prompt name, the model card's
    query and document vectors (encode_query, encode_document) and their similarities, its prompts and max length."""

    vectors: dict[str, np.ndarray]  # name -> (N, 768)
    query: np.ndarray  # (768,)
    documents: np.ndarray  # (4, 768)
    similarities: np.ndarray  # (4,)
    prompts: dict[str, str]
    max_seq_length: int


@pytest.fixture(scope="module")
def reference() -> Reference:
    """Computed once, first, so that sentence-transformers' model (1.2 GB) is gone before the export."""
    model: Any = load_reference(embeddinggemma_dir())
    query, documents = model.encode_query(QUERY), model.encode_document(DOCUMENTS)
    return Reference(vectors={name: model.encode(TEXTS, prompt_name=name) for name in PROMPTS}, query=query,
                     documents=documents, similarities=model.similarity(query, documents).numpy()[0],
                     prompts=model.prompts, max_seq_length=model.max_seq_length)


@pytest.mark.parametrize("name", ["query", "document"])
def test_checkpoint_loads_equal_to_sentence_transformers(reference: Reference, name: str) -> None:
    """Before any export: model.load reads the directory (prompts, pooling, both Dense layers, Normalize) and the
    encoder's embedding of the prompted texts is sentence-transformers' encode_query / encode_document."""
    loaded = load_model(embeddinggemma_dir())
    assert loaded.prompts == reference.prompts and loaded.default_prompt_name is None
    texts = [QUERY] if name == "query" else DOCUMENTS
    prompted = [loaded.prompts[name] + t for t in texts]
    ids, mask = encode(loaded.tokenizer, prompted, loaded.encoder.config.max_seq_length)
    with torch.no_grad():
        ours = loaded.encoder(ids, mask).embedding.numpy()  # (N, 768)
    found = cosines(ours, reference.query[None] if name == "query" else reference.documents)
    assert found.min() >= COSINE, found


@pytest.fixture(scope="module")
def bundle(reference: Reference, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The export, after the reference is computed."""
    out = tmp_path_factory.mktemp("embeddinggemma") / "bundle"
    export_bundle(embeddinggemma_dir(), out)  # the default variants, the default gates: raises ParityError on a miss
    return out


def test_bundle_has_the_default_graphs_and_the_models_prompts(bundle: Path, reference: Reference) -> None:
    manifest = Manifest.read(bundle)
    built = {(g.kind, g.variant) for g in manifest.graphs}
    assert built == {("fast", "fp32"), ("fast", "fp32-opt"), ("attention", "fp32")}, built
    assert all(g.parity for g in manifest.graphs)  # each measured against eager PyTorch, within its gate
    assert manifest.max_length == reference.max_seq_length and manifest.embedding_size == 768
    assert manifest.pooling == "mean" and manifest.normalize
    assert manifest.prompts == reference.prompts and manifest.default_prompt_name is None


async def embedded(url: str, name: str) -> dict[str, Any]:
    """TEXTS' vectors from /v1/embeddings (by input_type, where the prompt is one) and /embed (by prompt_name)."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        found = {"/embed": await post_ok(client, "/embed", {"inputs": TEXTS, "prompt_name": name})}
        if name in ("query", "document"):
            data = (await post_ok(client, "/v1/embeddings", {"input": TEXTS, "input_type": name}))["data"]
            found["/v1/embeddings"] = [d["embedding"] for d in data]
    return found


@pytest.mark.parametrize("variant", ["fp32", "fp32-opt"])
async def test_served_vectors_equal_sentence_transformers(bundle: Path, reference: Reference, variant: str) -> None:
    async with uvicorn_here(bundle, variant=variant, intra_op_threads=2) as (_, url):
        for name in PROMPTS:
            for route, got in (await embedded(url, name)).items():
                found = cosines(got, reference.vectors[name])
                assert found.min() >= COSINE, (variant, name, route, found)


async def test_the_model_cards_similarities(bundle: Path, reference: Reference) -> None:
    """The card's query against its documents, each embedded by input_type over HTTP, scored by cosine."""
    async with uvicorn_here(bundle, intra_op_threads=2) as (_, url), \
            httpx.AsyncClient(base_url=url, timeout=60) as client:
        query = await post_ok(client, "/v1/embeddings", {"input": QUERY, "input_type": "query"})
        documents = await post_ok(client, "/v1/embeddings", {"input": DOCUMENTS, "input_type": "document"})
    q = np.asarray(query["data"][0]["embedding"], dtype=np.float64)
    d = np.asarray([item["embedding"] for item in documents["data"]], dtype=np.float64)
    ours = (d @ q) / np.linalg.norm(d, axis=-1) / np.linalg.norm(q)  # (4,)
    assert np.abs(ours - reference.similarities).max() <= 1e-5, (ours, reference.similarities)
