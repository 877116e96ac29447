"""Tasks (LoRA adapters) served: a jina-v3-shaped bundle with three adapters (tests.helpers.tasks) beside a bundle
without any, over HTTP. Every adapter's vectors and attention maps equal transformers + PEFT with that adapter
active, the bare base's equal PEFT with adapters disabled, inputs of different adapters share one batch and
still get their own adapter's answer, and the answer cache keeps them apart; `task` (and its prompt), the
`base:task` model names, /v1/models, /info, /v2's `task` parameter and the served document; the 422s.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio

from inference.runtime.graphs import BatchKind, TokenSequence
from inference.runtime.loading import LoadedBundle
from tests.helpers.fakes import GatedBundle, held
from tests.helpers.serving import assert_error, post_ok, serving, until, worst
from tests.helpers.tasks import PROMPTS, TASKS, TaskReference
from tests.helpers.tokenizers import MULTILINGUAL

pytestmark = pytest.mark.asyncio(loop_scope="module")
TOLERANCE = 1e-5
TEXTS = MULTILINGUAL[:4]


@dataclasses.dataclass
class Recording(GatedBundle):
    """The gated bundle, recording each graph run's adapter index per row."""

    runs: list[list[int]] = dataclasses.field(default_factory=list)

    @classmethod
    def around(cls, loaded: LoadedBundle) -> Recording:
        fake = cls(**{f.name: getattr(loaded, f.name) for f in dataclasses.fields(LoadedBundle)})
        fake.gate.set()
        return fake

    def run_batch(self, kind: BatchKind, sequences: list[TokenSequence], adapters: Sequence[int] | None = None) -> Any:
        self.runs.append(list(adapters or [0] * len(sequences)))
        return super().run_batch(kind, sequences, adapters)


@pytest.fixture(scope="module")
def reference(task_model: Any) -> TaskReference:
    return TaskReference(task_model)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def client(task_bundle: Path, tiny_plain_bundle: Path) -> AsyncIterator[httpx.AsyncClient]:
    """jina (the adapters) first, plain (none) second; the answer cache on."""
    async with serving([f"jina={task_bundle}", f"plain={tiny_plain_bundle}"], intra_op_threads=1) as (_, served):
        yield served


def _embedding(answer: dict[str, Any]) -> np.ndarray:
    return np.asarray([d["embedding"] for d in answer["data"]], dtype=np.float32)


async def test_every_task_gives_peft_vectors_with_its_prompt(client, reference) -> None:
    """Each adapter (and the base) in turn over the same texts, the cache on: text-matching has no prompt, so its
    token ids are the base's and only the adapter in the cache key keeps their answers apart."""
    base = reference.pooled(TEXTS, None)
    for task in (None, *TASKS):
        expected = reference.pooled(TEXTS, task, PROMPTS.get(task or "", ""))
        if task is not None:
            assert worst(expected, base) > 1e-3  # the adapter matters
        body = {"inputs": TEXTS, "normalize": False, **({"task": task} if task else {})}
        assert worst(await post_ok(client, "/embed", body), expected) <= TOLERANCE
        named = await post_ok(client, "/v1/embeddings", {"input": TEXTS, "model": f"jina:{task}" if task else "jina"})
        assert worst(_embedding(named), reference.unit(TEXTS, task, PROMPTS.get(task or "", ""))) <= TOLERANCE
    for task in TASKS:  # again, now from the cache: still each adapter's own
        answer = await client.post("/v1/embeddings", json={"input": TEXTS, "model": "jina", "task": task})
        assert answer.headers["x-cached-inputs"] == str(len(TEXTS))
        assert worst(_embedding(answer.json()), reference.unit(TEXTS, task, PROMPTS.get(task, ""))) <= TOLERANCE


async def test_a_named_prompt_or_input_type_wins_over_the_tasks_prompt(client, reference) -> None:
    body = {"inputs": TEXTS, "normalize": False, "task": "retrieval.query", "prompt_name": "retrieval.passage"}
    expected = reference.pooled(TEXTS, "retrieval.query", PROMPTS["retrieval.passage"])
    assert worst(await post_ok(client, "/embed", body), expected) <= TOLERANCE
    answer = await post_ok(client, "/v1/embeddings", {"input": TEXTS, "task": "retrieval.query",
                                                      "input_type": "document"})  # no prompt named document
    assert worst(_embedding(answer), reference.unit(TEXTS, "retrieval.query")) <= TOLERANCE


async def test_inputs_of_different_tasks_share_a_batch_and_keep_their_adapter(task_bundle, reference) -> None:
    """Four requests (the base and each task), sent at once while the graph is held, run as one batch with
    each row's adapter; every answer equals its own adapter's reference."""
    tasks, texts = (None, *TASKS), MULTILINGUAL[:5]  # two texts each, each text in two requests
    async with serving(task_bundle, wrap=Recording.around, intra_op_threads=1, cache_bytes=0) as (app, client):
        gated: Recording = app.state.models.default.bundle
        async with held(app, client):
            sent = [asyncio.create_task(client.post("/embed", json={
                "inputs": texts[i:i + 2], "normalize": False, **({"task": task} if task else {})}))
                for i, task in enumerate(tasks)]
            await until(lambda: app.state.models.default.batcher.depth == 2 * len(tasks))
            gated.runs.clear()
        answers = await asyncio.gather(*sent)
    assert sorted(gated.runs[0]) == [0, 0, 1, 1, 2, 2, 3, 3]  # one batch, every adapter in it
    for i, (task, answer) in enumerate(zip(tasks, answers, strict=True)):
        assert answer.status_code == 200, answer.text
        expected = reference.pooled(texts[i:i + 2], task, PROMPTS.get(task or "", ""))
        assert worst(answer.json(), expected) <= TOLERANCE


async def test_attention_maps_are_the_adapters(client, reference) -> None:
    text = TEXTS[1]
    for task in ("retrieval.passage", None):
        body = {"inputs": text, "model": "jina", **({"task": task} if task else {})}
        (item,) = (await post_ok(client, "/attention", body))["data"]
        assert worst(item["attention"], reference.attentions(text, task)) <= TOLERANCE
    assert worst(reference.attentions(text, "retrieval.passage"), reference.attentions(text, None)) > 1e-4


async def test_models_and_info_list_the_tasks(client) -> None:
    listed = (await client.get("/v1/models")).json()["data"]
    assert [m["id"] for m in listed] == ["jina", *(f"jina:{t}" for t in TASKS), "plain"]
    assert [m["adapter"] for m in listed] == [None, *TASKS, None]
    assert listed[0]["adapters"] == list(TASKS) and listed[-1]["adapters"] == []
    info = (await client.get("/info")).json()
    assert info["adapters"] == list(TASKS)
    assert [m["adapters"] for m in info["models"]] == [list(TASKS), []]


async def test_v2_takes_the_task_parameter_and_the_task_name(client, reference) -> None:
    infer = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(TEXTS)], "data": TEXTS}],
             "parameters": {"task": "retrieval.query"}, "outputs": [{"name": "embeddings"}]}
    expected = reference.unit(TEXTS, "retrieval.query", PROMPTS["retrieval.query"])
    for path, body in (("/v2/models/jina/infer", infer),
                       ("/v2/models/jina:retrieval.query/infer", {**infer, "parameters": {}})):
        (embeddings,) = (await post_ok(client, path, body))["outputs"]
        assert worst(np.reshape(embeddings["data"], embeddings["shape"]), expected) <= TOLERANCE
    refused = await client.post("/v2/models/jina/infer", json={**infer, "parameters": {"task": "separation"}})
    assert refused.status_code == 422 and "'separation' is not one of model jina's tasks" in refused.json()["error"]


async def test_unknown_and_disagreeing_tasks_and_tasks_without_adapters_are_422(client) -> None:
    known = ", ".join(repr(t) for t in TASKS)
    cases = [
        ("/embed", {"inputs": "x", "task": "separation"}, "unknown_task",
         f"task 'separation' is not one of model jina's tasks (it has: {known})"),
        ("/v1/embeddings", {"input": "x", "model": "jina:separation"}, "unknown_task", "'separation'"),
        ("/embed", {"inputs": "x", "model": "plain", "task": "retrieval.query"}, "no_tasks",
         "model plain has no tasks"),
        ("/v1/embeddings", {"input": "x", "model": "plain:retrieval.query"}, "no_tasks", "model plain has no tasks"),
        ("/v1/embeddings", {"input": "x", "model": "jina:retrieval.query", "task": "text-matching"}, "task_conflict",
         "two tasks for model jina: 'retrieval.query' and 'text-matching'"),
        ("/attention", {"inputs": "x", "model": "jina", "task": "nope"}, "unknown_task", "'nope'"),
        ("/similarity", {"inputs": {"source_sentence": "x", "sentences": ["y"]}, "task": "nope"}, "unknown_task",
         "'nope'"),
        ("/embed_all", {"inputs": "x", "model": "plain", "task": "nope"}, "no_tasks", "model plain has no tasks"),
    ]
    for path, body, code, message in cases:
        error = assert_error(await client.post(path, json=body), 422, code)
        assert message in error["message"], (path, error)


async def test_the_served_document_names_the_tasks(task_bundle, client) -> None:
    both = (await client.get("/openapi.json")).json()["components"]["schemas"]
    assert [b.get("type") for b in both["EmbedRequest"]["properties"]["task"]["anyOf"]] == ["null"]  # plain: none
    async with serving(task_bundle, intra_op_threads=1) as (_, alone):
        schemas = (await alone.get("/openapi.json")).json()["components"]["schemas"]
    for name in ("EmbedRequest", "OpenAIEmbeddingRequest", "EmbedAllRequest", "AttentionRequest", "SimilarityRequest"):
        field = schemas[name]["properties"]["task"]
        assert field["anyOf"][0] == {"type": "string", "enum": list(TASKS)}, name
        assert "LoRA adapter" in field["description"] and "prompt" in field["description"]
