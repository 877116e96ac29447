"""The decoder embedders as sentence-transformers runs them: a Qwen3-Embedding-style directory (last-token
pooling, Normalize, its instruction prompt for queries) and an EmbeddingGemma-style one (bidirectional Gemma3,
mean pooling, two bias-free Dense modules, Normalize, its task prompts), loaded by model.load.load_model, embed
as sentence-transformers' encode(texts, prompt_name=...) does to max abs 1e-5, at two shapes.

Shape letters: B batch, E embedding width.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from model.load import load_model
from model.tokenizer import encode
from tests.helpers.sentence import load_reference, save_sentence_transformer
from tests.helpers.tokenizers import MULTILINGUAL

TOLERANCE = 1e-5
QWEN3_PROMPTS = {"query": "Instruct: Given a web search query, retrieve relevant passages that answer the query\n"
                          "Query:", "document": ""}
GEMMA_PROMPTS = {"query": "task: search result | query: ", "document": "title: none | text: ",
                 "Classification": "task: classification | query: "}
CASES = {  # name: (arch, pooling, dense activation, Dense modules, prompts)
    "qwen3-embedding": ("qwen3", "lasttoken", None, 0, QWEN3_PROMPTS),
    "embeddinggemma": ("embeddinggemma", "mean", "identity", 2, GEMMA_PROMPTS),
}


@pytest.mark.parametrize("shape", ["small", "wide"])
@pytest.mark.parametrize("case", CASES)
def test_embeddings_match_sentence_transformers(tmp_path: Path, case: str, shape: str) -> None:
    arch, pooling, dense, denses, prompts = CASES[case]
    directory = save_sentence_transformer(tmp_path / "st", arch, pooling, dense, denses=denses, prompts=prompts,
                                          shape=shape, max_seq_length=48)
    reference, loaded = load_reference(directory), load_model(directory)
    config = loaded.encoder.config
    assert loaded.prompts == prompts and len(config.projection_chain) == max(denses - 1, 0)
    texts = [*MULTILINGUAL, " ".join(MULTILINGUAL)]  # the last is cut at max_seq_length
    for name in prompts:
        expected = reference.encode(texts, prompt_name=name, convert_to_tensor=True)  # type: ignore[attr-defined]
        ids, mask = encode(loaded.tokenizer, [prompts[name] + t for t in texts], config.serving_length)
        with torch.no_grad():
            got = torch.nn.functional.normalize(loaded.encoder(ids, mask).embedding, dim=-1)  # (B, E)
        assert got.shape == expected.shape
        assert (got - expected).abs().max() <= TOLERANCE, name
