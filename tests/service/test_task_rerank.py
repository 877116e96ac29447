"""Rerank and score with a task: a cross-encoder bundle with LoRA adapters, served, against transformers + PEFT.

The model is a random-weight BertForSequenceClassification with one label (a cross-encoder: 3 layers, 2 heads of
width 64) and two PEFT LoRA adapters over it (lora_B random; one on the attention's q/k/v, one on the dense
layers), exported with `adapters=`. TEI's /rerank (raw logits and sigmoid), Cohere's /v1/rerank and vLLM's
/score with `task` (or a `base:task` model name) answer that adapter's scores, to 1e-5 on the logits, and differ
from the bare base's, which a request without a task gets.

PEFT's own sequence-classification LoRA (task_type SEQ_CLS) puts the classifier in modules_to_save: a whole
module trained anew, which the exporter refuses, so the adapters served here are plain LoRA over the head model
(no task_type: modules_to_save None), and the classifier stays the base's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import peft
import pytest
import pytest_asyncio
import torch
import transformers

from export.bundle import export_bundle
from model.peft import AdapterError
from tests.helpers.adapters import peft_reference, run_reference, save_adapter
from tests.helpers.families import MAX_POSITIONS, RELEVANCE, save_random
from tests.helpers.heads import WIDE, Case
from tests.helpers.serving import post_ok, serving, worst
from tests.helpers.tokenizers import MULTILINGUAL, wordpiece

ASYNC = pytest.mark.asyncio(loop_scope="module")
TOLERANCE = 1e-5  # on the logits, times the largest |logit| past 1 (the export gates' rule: float32 rounds relatively)


def logit_limit(logits: np.ndarray) -> float:
    return TOLERANCE * max(1.0, float(np.abs(logits).max()))


def sigmoid_limit(logits: np.ndarray) -> float:
    """The sigmoid's slope is at most 1/4, so logits within logit_limit give scores within a quarter of it; and the
    server's sigmoid is float32 (one rounding, under 1e-7 for scores <= 1)."""
    return logit_limit(logits) / 4 + 1e-7

LORAS: dict[str, dict[str, Any]] = {  # PEFT LoraConfig fields per adapter (PEFT names cannot hold a dot)
    "qa": dict(r=4, lora_alpha=8, target_modules=["query", "key", "value"]),
    "legal": dict(r=8, lora_alpha=16, use_rslora=True, target_modules=["intermediate.dense", "output.dense"]),
}
TASKS = tuple(LORAS)
QUERY = "Café crème à Zürich"
DOCUMENTS = [*MULTILINGUAL[1:6], " ".join(MULTILINGUAL[8:10] + MULTILINGUAL[0:1])]  # the last: past 64 tokens


def _load(path: Path) -> torch.nn.Module:
    return transformers.BertForSequenceClassification.from_pretrained(path, attn_implementation="eager")


def _make(root: Path) -> Case:
    """The cross-encoder at root/source, its adapters at root/adapters/NAME, its bundle at root/bundle; the Case's
    model is the reference: transformers + PEFT with every adapter loaded."""
    source, tokenizer = root / "source", wordpiece()
    config = transformers.BertConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=128, num_attention_heads=2, num_hidden_layers=3,
        intermediate_size=256, max_position_embeddings=MAX_POSITIONS, initializer_range=WIDE,
        id2label=RELEVANCE, label2id={v: k for k, v in RELEVANCE.items()})
    save_random(source, transformers.BertForSequenceClassification, config, tokenizer, seed=7)
    adapters = {name: save_adapter(source, root / "adapters" / name, _load, seed=seed, **lora)
                for seed, (name, lora) in enumerate(LORAS.items(), start=21)}
    export_bundle(source, root / "bundle", variants=("fp32",), name="ce", adapters=adapters)
    return Case("bert", source, root / "bundle", peft_reference(source, _load, adapters))


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Case:
    return _make(tmp_path_factory.mktemp("task-rerank"))


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def client(cross_encoder: Case) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(f"ce={cross_encoder.bundle}", intra_op_threads=1, cache_bytes=0) as (_, served):
        yield served


def reference_logits(cross_encoder: Case, task: str | None, documents: list[str]) -> np.ndarray:
    """(N,) transformers + PEFT logits of (QUERY, document) pairs, the adapter `task` active (None: the base),
    tokenised by transformers with the pair template (token type ids), padded, cut to the model's positions."""
    feeds = cross_encoder.tokenizer([QUERY] * len(documents), documents, padding=True, truncation=True,
                                    max_length=MAX_POSITIONS, return_token_type_ids=True, return_tensors="pt")
    return run_reference(cross_encoder.model, task, **feeds).logits[:, 0].numpy()  # (N,)


def _sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-logits.astype(np.float64)))


def _by_index(ranked: list[dict[str, Any]], field: str) -> np.ndarray:
    return np.array([r[field] for r in sorted(ranked, key=lambda r: r["index"])])


def test_the_pairs_are_two_shapes_and_the_adapters_matter(cross_encoder: Case) -> None:
    """The documents: a padded batch whose longest pair is past the model's 64 positions (cut longest-first, by
    the server as by transformers, to all 64) and its shortest under half as long; and each adapter moves every
    score well past the tolerance."""
    lengths = [len(cross_encoder.tokenizer(QUERY, d)["input_ids"]) for d in DOCUMENTS]
    assert lengths[-1] > MAX_POSITIONS and min(lengths) < MAX_POSITIONS / 2, lengths
    base = reference_logits(cross_encoder, None, DOCUMENTS)
    for task in TASKS:
        moved = np.abs(reference_logits(cross_encoder, task, DOCUMENTS) - base)
        assert moved.min() > 100 * TOLERANCE, (task, moved)


def test_a_seq_cls_adapter_is_refused_for_its_modules_to_save(cross_encoder: Case, tmp_path: Path) -> None:
    """PEFT's SEQ_CLS task type adds the classifier to modules_to_save; the exporter names that as the reason."""
    source = cross_encoder.source
    seq_cls = save_adapter(source, tmp_path / "seq-cls", _load, seed=3, task_type="SEQ_CLS", **LORAS["qa"])
    assert peft.PeftConfig.from_pretrained(seq_cls).modules_to_save  # PEFT put the classifier there
    with pytest.raises(AdapterError, match="modules_to_save"):
        export_bundle(source, tmp_path / "bundle", variants=("fp32",), adapters={"qa": seq_cls})


@ASYNC
async def test_tei_rerank_with_a_task_gives_the_adapters_logits(client, cross_encoder) -> None:
    for task in (None, *TASKS):
        expected = reference_logits(cross_encoder, task, DOCUMENTS)  # (N,)
        body = {"query": QUERY, "texts": DOCUMENTS, "raw_scores": True, **({"task": task} if task else {})}
        ranked = await post_ok(client, "/rerank", body)
        assert [r["score"] for r in ranked] == sorted((r["score"] for r in ranked), reverse=True)
        assert worst(_by_index(ranked, "score"), expected) <= logit_limit(expected), task
        sigmoid = await post_ok(client, "/rerank", {**body, "raw_scores": False})
        assert worst(_by_index(sigmoid, "score"), _sigmoid(expected)) <= sigmoid_limit(expected), task
        alone = await post_ok(client, "/rerank", {**body, "texts": DOCUMENTS[-1:]})  # one pair: no padding
        assert abs(alone[0]["score"] - float(expected[-1])) <= logit_limit(expected), task
    base = _by_index(await post_ok(client, "/rerank", {"query": QUERY, "texts": DOCUMENTS, "raw_scores": True}),
                     "score")
    for task in TASKS:
        tasked = await post_ok(client, "/rerank", {"query": QUERY, "texts": DOCUMENTS, "raw_scores": True,
                                                   "task": task})
        assert np.abs(_by_index(tasked, "score") - base).min() > 100 * TOLERANCE, task


@ASYNC
async def test_cohere_rerank_with_a_task_or_a_task_name(client, cross_encoder) -> None:
    for task in (None, *TASKS):
        logits = reference_logits(cross_encoder, task, DOCUMENTS)  # (N,)
        expected = _sigmoid(logits)
        bodies = [{"model": "ce", "query": QUERY, "documents": DOCUMENTS, **({"task": task} if task else {})}]
        if task is not None:
            bodies.append({"model": f"ce:{task}", "query": QUERY, "documents": DOCUMENTS})
        for body in bodies:
            answer = await post_ok(client, "/v1/rerank", body)
            assert len(answer["results"]) == len(DOCUMENTS)
            assert worst(_by_index(answer["results"], "relevance_score"), expected) <= sigmoid_limit(logits), body
        top = await post_ok(client, "/v1/rerank", {**bodies[0], "top_n": 2})
        assert [r["index"] for r in top["results"]] == [int(i) for i in np.argsort(-expected)[:2]]


@ASYNC
async def test_score_with_a_task(client, cross_encoder) -> None:
    base = _sigmoid(reference_logits(cross_encoder, None, DOCUMENTS))
    for task in (None, *TASKS):
        logits = reference_logits(cross_encoder, task, DOCUMENTS)  # (N,)
        expected = _sigmoid(logits)
        body = {"model": "ce", "text_1": QUERY, "text_2": DOCUMENTS, **({"task": task} if task else {})}
        for path in ("/score", "/v1/score"):
            answer = await post_ok(client, path, body)
            got = np.array([d["score"] for d in answer["data"]])
            assert worst(got, expected) <= sigmoid_limit(logits), (path, task)
            if task is not None:
                assert np.abs(got - base).min() > 100 * TOLERANCE, (path, task)
