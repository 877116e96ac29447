"""An LLM reranker (Qwen3-Reranker's recipe, model/lm_scorer.py) against its authors' scoring code run on
transformers: a random-weight Qwen3ForCausalLM with the recipe's special tokens, exported as a one-label
cross-encoder and served; its scores on every rerank route equal softmax over the "no" and "yes" logits at the last
token of prefix + pair + suffix (max abs 1e-5), at two shapes, and its graph computes no vocabulary-sized output.

Shape letters: N documents, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from bundle.manifest import Manifest
from model.lm_scorer import DEFAULT_INSTRUCTION, RECIPES, load_lm_scorer
from tests.helpers.decoders import reference_scores, reranker_tokenizer, save_decoder
from tests.helpers.serving import serving
from tests.helpers.tokenizers import MULTILINGUAL

TOLERANCE = 1e-5
RECIPE = RECIPES["qwen3"]
QUERY = "Where is the capital of France?"
DOCUMENTS = MULTILINGUAL[:5]


@pytest.fixture(scope="module", params=["small", pytest.param("wide", marks=pytest.mark.heavy)])  # wide: heavy tier
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    from export.bundle import export_bundle

    root = tmp_path_factory.mktemp(f"reranker-{request.param}")
    reference = save_decoder(root / "source", "qwen3", "ForCausalLM", request.param, tokenizer=reranker_tokenizer(),
                             max_position_embeddings=384)  # a 400-token vocabulary: a prompt of 150 tokens
    export_bundle(root / "source", root / "bundle", variants=("fp32",), reranker="qwen3")
    yield root, reference


def test_the_head_is_the_yes_row_minus_the_no_row(exported: tuple) -> None:
    root, reference = exported
    loaded = load_lm_scorer(root / "source", "qwen3")
    tokenizer = loaded.tokenizer
    rows = reference.lm_head.weight
    expected = rows[tokenizer.token_to_id("yes")] - rows[tokenizer.token_to_id("no")]
    assert torch.equal(loaded.encoder.head.classifier.weight[0], expected)  # type: ignore[union-attr]
    manifest = Manifest.read(root / "bundle")
    assert manifest.task == "classify" and manifest.labels == ["relevance"]
    assert manifest.pair_format == RECIPE.pair_format.replace("{instruction}", DEFAULT_INSTRUCTION)
    fast = manifest.graph("fast", "fp32")
    assert fast is not None and [o.shape for o in fast.outputs if o.name == "logits"] == [["batch", 1]]


async def test_every_rerank_route_scores_as_the_reference(exported: tuple) -> None:
    root, reference = exported
    tokenizer = Tokenizer.from_file(str(root / "source" / "tokenizer.json"))
    expected = reference_scores(reference, tokenizer, QUERY, DOCUMENTS)
    async with serving(root / "bundle", intra_op_threads=1) as (_, client):
        tei = (await client.post("/rerank", json={"query": QUERY, "texts": DOCUMENTS})).json()
        cohere = (await client.post("/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS})).json()
        score = (await client.post("/score", json={"text_1": QUERY, "text_2": DOCUMENTS})).json()
        explained = await client.post("/rerank", json={"query": QUERY, "texts": DOCUMENTS, "explain": True})
    assert explained.status_code == 422 and "writes each pair into its prompt" in explained.text
    got = {"tei": [r["score"] for r in sorted(tei, key=lambda r: r["index"])],
           "cohere": [r["relevance_score"] for r in sorted(cohere["results"], key=lambda r: r["index"])],
           "score": [d["score"] for d in score["data"]]}
    for route, scores in got.items():
        assert np.abs(np.asarray(scores) - expected).max() <= TOLERANCE, (route, scores, expected)
