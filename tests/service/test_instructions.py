"""Qwen3-Embedding's instruction format with the task given per request (inference/prompts.py): the
Qwen3-Embedding-style bundle (tests/helpers/exports.py, "qwen3-sentence") embeds `instruction` as
sentence-transformers encodes `Instruct: {task}\\nQuery:{text}`, on /embed and /v1/embeddings; usage counts the
instruction's tokens; /info and /v1/models show the format; a model without an instruction prompt, an
instruction beside a prompt_name, and an empty one are refused with 422.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from model.tokenizer import load_tokenizer
from tests.helpers.exports import Exported
from tests.helpers.sentence import load_reference
from tests.helpers.serving import serving
from tests.helpers.tokenizers import MULTILINGUAL

TOLERANCE = 1e-5
TASK = "Find the capital city named in the text"
TEXTS = MULTILINGUAL[:4]


async def test_an_instruction_embeds_as_sentence_transformers(family_export: Callable[[str], Exported],
                                                              tiny_bundle) -> None:  # type: ignore[no-untyped-def]
    exported = family_export("qwen3-sentence")
    reference = load_reference(exported.source)
    prompt = f"Instruct: {TASK}\nQuery:"
    expected = reference.encode(TEXTS, prompt=prompt)  # type: ignore[attr-defined]
    default = reference.encode(TEXTS, prompt_name="query")  # type: ignore[attr-defined]
    async with serving([exported.bundle, f"tiny={tiny_bundle}"], intra_op_threads=1) as (_, client):
        tei = (await client.post("/embed", json={"inputs": TEXTS, "instruction": TASK})).json()
        openai = (await client.post("/v1/embeddings", json={"input": TEXTS, "instruction": TASK,
                                                             "input_type": "query"})).json()
        plain = (await client.post("/v1/embeddings", json={"input": TEXTS, "input_type": "query"})).json()
        info = (await client.get("/info")).json()
        models = (await client.get("/v1/models")).json()["data"]
        refused = [await client.post("/embed", json=body) for body in (
            {"inputs": TEXTS, "instruction": TASK, "prompt_name": "query"},
            {"inputs": TEXTS, "instruction": ""},
            {"inputs": TEXTS, "instruction": TASK, "model": "tiny"},
            {"inputs": TEXTS, "instruction": TASK, "chunking": "mean"})]
        mixed = (await client.get("/openapi.json")).json()["components"]["schemas"]
    assert np.abs(np.asarray(tei) - expected).max() <= TOLERANCE
    assert np.abs(np.asarray([d["embedding"] for d in openai["data"]]) - expected).max() <= TOLERANCE
    assert np.abs(np.asarray([d["embedding"] for d in plain["data"]]) - default).max() <= TOLERANCE
    tokenizer = load_tokenizer(exported.source / "tokenizer.json")
    assert openai["usage"]["prompt_tokens"] == sum(len(tokenizer.encode(prompt + t).ids) for t in TEXTS)
    format_ = {"template": "Instruct: {instruction}\nQuery:",
               "default": "Given a web search query, retrieve relevant passages that answer the query"}
    assert info["models"][0]["instruction"] == format_ and info["models"][1]["instruction"] is None
    assert models[0]["instruction"] == format_
    assert [r.status_code for r in refused] == [422, 422, 422, 422]
    assert "cannot be given with prompt_name" in refused[0].json()["error"]["message"]
    assert refused[2].json()["error"]["code"] == "instruction_not_taken"
    assert "takes no instruction" in refused[2].json()["error"]["message"]
    assert "cannot be given with chunking" in refused[3].json()["error"]["message"]
    # the served document takes an instruction only where every model does: with the tiny model, only null
    assert mixed["EmbedRequest"]["properties"]["instruction"]["anyOf"] == [{"type": "null"}]
    async with serving(exported.bundle, intra_op_threads=1) as (_, alone):
        schemas = (await alone.get("/openapi.json")).json()["components"]["schemas"]
    assert {"type": "string", "minLength": 1, "maxLength": 2000} in \
        schemas["OpenAIEmbeddingRequest"]["properties"]["instruction"]["anyOf"]
