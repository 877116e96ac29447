"""Qwen3-Embedding's instruction format with the task given per request (inference/prompts.py). The
Qwen3-Embedding-style sentence-transformers directory (tests/helpers/exports.py "qwen3-sentence": last-token
pooling, Normalize, its one instruction prompt) exported once per session and served beside the tiny model, which
has no prompt; sentence-transformers' own `encode(texts, prompt="Instruct: {task}\\nQuery:")` of that directory is
the reference:

    instruction on /embed, POST /, /v1/embeddings   the reference's vectors (1e-5); input_type query alone: the
                                                    model's own prompt; usage counts the instruction's tokens
    /embed_all, /similarity, /v2 infer              the reference's token vectors, cosines and vectors
    the corpus job's --instruction                  /embed's vectors with the same instruction, bit for bit
    refused, 422, no graph run                      beside prompt_name, input_type document or chunking; empty or
                                                    over 2,000 characters; by a model without an instruction prompt
    the format, from the model's prompts            its template in the prompt's spacing, and its default task
    /info, /v1/models, the OpenAPI document         the format and default task, or null; the document takes an
                                                    instruction only where every served model does
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio
from fastapi import FastAPI

from inference.prompts import Instruction, instruction_of
from jobs.cli import main
from model.tokenizer import load_tokenizer
from tests.helpers.exports import Exported
from tests.helpers.sentence import load_reference
from tests.helpers.serving import assert_error, graph_runs, post_ok, serving, worst
from tests.helpers.tokenizers import MULTILINGUAL
from tests.jobs.corpus import output, vectors, write

pytestmark = pytest.mark.asyncio(loop_scope="module")
TOLERANCE = 1e-5
CASE = "qwen3-sentence"
TASK = "Find the capital city"
PROMPT = f"Instruct: {TASK}\nQuery:"  # Qwen3-Embedding's spacing: no space after "Query:"
FORMAT = {"template": "Instruct: {instruction}\nQuery:",
          "default": "Given a web search query, retrieve relevant passages that answer the query"}
TEXTS = MULTILINGUAL[:4]
INSTRUCTED = ("EmbedRequest", "OpenAIEmbeddingRequest", "EmbedAllRequest", "SimilarityParameters", "InferParameters")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def served(family_export: Callable[[str], Exported], tiny_bundle: Path,
                 ) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    async with serving([family_export(CASE).bundle, f"tiny={tiny_bundle}"], intra_op_threads=1) as pair:
        yield pair


@pytest.fixture(scope="module")
def reference(family_export: Callable[[str], Exported]) -> dict[str, Any]:
    """sentence-transformers' encode() of TEXTS with the instruction, with the model's query prompt, and the
    instructed token vectors."""
    model: Any = load_reference(family_export(CASE).source)
    return {"instructed": model.encode(TEXTS, prompt=PROMPT), "query": model.encode(TEXTS, prompt_name="query"),
            "tokens": [t.numpy() for t in model.encode(TEXTS, prompt=PROMPT, output_value="token_embeddings")]}




def data(answer: dict[str, Any]) -> list[list[float]]:
    return [d["embedding"] for d in answer["data"]]


async def test_the_format_is_read_from_the_models_prompts_in_its_spacing() -> None:
    """e5-mistral and gte-Qwen2 write a space after "Query:", Qwen3-Embedding none; the "query" prompt comes first;
    a prompt of another form is no instruction."""
    e5 = f"Instruct: {FORMAT['default']}\nQuery: "
    assert instruction_of({"query": e5, "document": ""}) == Instruction("Instruct: {instruction}\nQuery: ",
                                                                        FORMAT["default"])
    plain = FORMAT["template"]
    assert instruction_of({"a": "Instruct: A\nQuery:", "query": "Instruct: Q\nQuery:"}) == Instruction(plain, "Q")
    assert instruction_of({"web": "Instruct: A\nQuery:"}) == Instruction(plain, "A")
    for other in ({"query": "query: ", "document": "passage: "}, {"query": "Instruct: A\nQuery:  "}, {}):
        assert instruction_of(other) is None, other


async def test_an_instruction_embeds_as_sentence_transformers(served, reference) -> None:
    _, client = served
    expected = reference["instructed"]
    assert not np.allclose(expected, reference["query"], atol=1e-3)  # the task matters
    assert worst(await post_ok(client, "/embed", {"inputs": TEXTS, "instruction": TASK}), expected) <= TOLERANCE
    assert worst(await post_ok(client, "/", {"inputs": TEXTS, "instruction": TASK}), expected) <= TOLERANCE
    for extra in ({}, {"input_type": "query"}):
        answer = await post_ok(client, "/v1/embeddings", {"input": TEXTS, "instruction": TASK, **extra})
        assert worst(data(answer), expected) <= TOLERANCE
    plain = await post_ok(client, "/v1/embeddings", {"input": TEXTS, "input_type": "query"})
    assert worst(data(plain), reference["query"]) <= TOLERANCE  # no instruction: the model's own prompt


async def test_usage_counts_the_instructions_tokens(served, family_export: Callable[[str], Exported]) -> None:
    _, client = served
    tokenizer = load_tokenizer(family_export(CASE).source / "tokenizer.json")
    instructed = [len(tokenizer.encode(PROMPT + t).ids) for t in TEXTS]
    usage = (await post_ok(client, "/v1/embeddings", {"input": TEXTS, "instruction": TASK}))["usage"]
    assert usage["prompt_tokens"] == sum(instructed) > sum(len(tokenizer.encode(t).ids) for t in TEXTS)


async def test_embed_all_similarity_and_v2_take_the_instruction(served, reference) -> None:
    _, client = served
    per_token = await post_ok(client, "/embed_all", {"inputs": TEXTS, "instruction": TASK})
    for got, expected in zip(per_token, reference["tokens"], strict=True):
        assert worst(got, expected) <= TOLERANCE * max(1.0, float(np.abs(expected).max()))
    unit = reference["instructed"]
    body = {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS[1:]}, "parameters": {"instruction": TASK}}
    assert worst(await post_ok(client, "/similarity", body), unit[1:] @ unit[0]) <= TOLERANCE
    name = (await client.get("/info")).json()["models"][0]["name"]
    infer = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(TEXTS)], "data": TEXTS}],
             "parameters": {"instruction": TASK}, "outputs": [{"name": "embeddings"}]}
    (embeddings,) = (await post_ok(client, f"/v2/models/{name}/infer", infer))["outputs"]
    assert worst(np.reshape(embeddings["data"], embeddings["shape"]), unit) <= TOLERANCE


REFUSED = [  # path, body, error code, what the message says
    ("/embed", {"inputs": TEXTS, "instruction": TASK, "prompt_name": "query"}, "instruction_not_taken",
     "cannot be given with prompt_name"),
    ("/v1/embeddings", {"input": TEXTS, "instruction": TASK, "input_type": "document"}, "instruction_not_taken",
     "cannot be given with prompt_name or input_type document"),
    ("/embed", {"inputs": TEXTS, "instruction": TASK, "chunking": "mean"}, "instruction_not_taken",
     "cannot be given with chunking"),
    ("/embed", {"inputs": TEXTS, "instruction": ""}, "validation_error", "instruction: String should have at least 1"),
    ("/v1/embeddings", {"input": TEXTS, "instruction": "x" * 2001}, "validation_error",
     "instruction: String should have at most 2000"),
    ("/embed", {"inputs": TEXTS, "instruction": TASK, "model": "tiny"}, "instruction_not_taken",
     "this model takes no instruction"),
    ("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b"]}, "parameters": {"instruction": TASK},
                     "model": "tiny"}, "instruction_not_taken", "this model takes no instruction"),
    ("/embed_all", {"inputs": TEXTS, "instruction": TASK, "prompt_name": "document"}, "instruction_not_taken",
     "cannot be given with prompt_name"),
]


@pytest.mark.parametrize(("path", "body", "code", "says"), REFUSED)
async def test_a_refused_instruction_is_a_422_before_any_graph(served, path: str, body: dict[str, Any], code: str,
                                                               says: str) -> None:
    app, client = served
    runs = graph_runs(app)
    error = assert_error(await client.post(path, json=body), 422, code)
    assert says in error["message"], error
    assert graph_runs(app) == runs


async def test_v2_refuses_it_for_a_model_without_an_instruction_prompt(served) -> None:
    app, client = served
    runs = graph_runs(app)
    infer = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a"]}],
             "parameters": {"instruction": TASK}}
    response = await client.post("/v2/models/tiny/infer", json=infer)
    assert response.status_code == 422 and "this model takes no instruction" in response.json()["error"]
    assert graph_runs(app) == runs


async def test_info_models_and_the_document_give_the_format(served, family_export: Callable[[str], Exported]) -> None:
    _, client = served
    info = (await client.get("/info")).json()
    assert info["instruction"] == FORMAT  # the default model's
    assert [m["instruction"] for m in info["models"]] == [FORMAT, None]
    assert [m["instruction"] for m in (await client.get("/v1/models")).json()["data"]] == [FORMAT, None]
    assert [_instruction(await _document(client), name) for name in INSTRUCTED] == [[{"type": "null"}]] * 5
    async with serving(family_export(CASE).bundle, intra_op_threads=1) as (_, alone):  # every model takes one
        document = await _document(alone)
    for name in INSTRUCTED:
        assert {"type": "string", "minLength": 1, "maxLength": 2000} in _instruction(document, name), name


async def _document(client: httpx.AsyncClient) -> dict[str, Any]:
    return (await client.get("/openapi.json")).json()


def _instruction(document: dict[str, Any], schema: str) -> list[dict[str, Any]]:
    """The `instruction` field's branches in `schema`, wherever the document defines it."""
    found = _find(document, schema)
    assert found is not None, schema
    return [{k: v for k, v in b.items() if k != "description"} for b in found["properties"]["instruction"]["anyOf"]]


def _find(node: Any, title: str) -> dict[str, Any] | None:
    if isinstance(node, dict):
        if node.get("title") == title and "properties" in node:
            return node
        node = list(node.values())
    if isinstance(node, list):
        return next((f for f in (_find(item, title) for item in node) if f is not None), None)
    return None


async def test_the_corpus_job_takes_the_instruction(served, family_export: Callable[[str], Exported],
                                                    tiny_bundle: Path, tmp_path: Path, capsys) -> None:
    _, client = served
    bundle = family_export(CASE).bundle
    path = write(tmp_path / "docs.jsonl", [{"id": f"d{i:02d}", "text": t} for i, t in enumerate(TEXTS)])
    argv = [str(path), "--id-column", "id", "--intra-op-threads", "1", "--instruction", TASK]
    assert main([*argv, "--bundle", str(bundle), "--out", str(tmp_path / "out")]) == 0
    expected = await post_ok(client, "/embed", {"inputs": TEXTS, "instruction": TASK})
    assert np.array_equal(vectors(output(tmp_path / "out")), np.asarray(expected, dtype=np.float32))
    refused = {"tiny": ["--bundle", str(tiny_bundle)], "chunked": ["--bundle", str(bundle), "--chunking", "mean"]}
    for name, flags in refused.items():
        assert main([*argv, *flags, "--out", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert "--instruction: this model takes no instruction" in err
    assert "--instruction cannot be given with --chunking" in err
