"""Cross-encoder routes, each in its ecosystem's shape: TEI's POST /rerank, Cohere's and Jina's POST /v1/rerank
and /v2/rerank (what LangChain's, LlamaIndex's, Dify's and RAGFlow's rerank integrations and the Cohere SDK
call), and vLLM's POST /score (and /v1/score). Every one takes attnserve's `chunking: "max"` and `explain`
(not /score, which scores pairs as given)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter, Depends, Response

from inference import rules
from inference.errors import InvalidRequest
from inference.served import ServedModel
from inference.tasks import rerank as core
from service import wire
from service.dependencies import Job, JobDep, ModelQuery, PickDep, needs, require_json
from service.head_schemas import (
    CohereRerankRequest,
    CohereRerankResponse,
    Rank,
    RerankOptions,
    RerankRequest,
    ScoreRequest,
    ScoreResponse,
)
from service.hot import HotRoute
from service.routes.common import INFERENCE_ERRORS, as_list, direction, errors, given, json_response

router = APIRouter(tags=["rerank"], dependencies=[Depends(require_json), Depends(needs("rerank"))])


@router.post("/rerank", response_model=list[Rank], responses=errors(*INFERENCE_ERRORS))
async def rerank(body: RerankRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """text-embeddings-inference: each text's score against the query (sigmoid, or the logit with raw_scores),
    best first."""
    return json_response(await rerank_answer(body, pick(body.model, model, adapter=body.task), job))


async def rerank_answer(body: RerankRequest, served: ServedModel, job: Job[Any]) -> Any:
    ranking = await job(_rank(served, body.query, body.texts, body, body.raw_scores, body.truncate,
                              direction(body)))
    return [
        {"index": i, "score": float(ranking.scores[i]), **({"text": body.texts[i]} if body.return_text else {}),
         **wire.rank_extras(ranking, i)} for i in ranking.order()
    ]


# TEI's rerank, answered on the short path when well formed (service.hot).
HOT = (HotRoute("/rerank", RerankRequest, rerank_answer, task="rerank"),)


@router.post("/v1/rerank", response_model=CohereRerankResponse, responses=errors(*INFERENCE_ERRORS),
             summary="Rerank, Cohere (v1) and Jina style")
async def rerank_v1(body: CohereRerankRequest, pick: PickDep, job: JobDep) -> Response:
    """Cohere's and Jina's rerank: `results` best first, each with `index` and `relevance_score` (and its
    `document` with return_documents)."""
    return await _cohere(body, pick, job)


@router.post("/v2/rerank", response_model=CohereRerankResponse, responses=errors(*INFERENCE_ERRORS),
             summary="Rerank, Cohere (v2) style")
async def rerank_v2(body: CohereRerankRequest, pick: PickDep, job: JobDep) -> Response:
    """Cohere's v2 rerank: as /v1/rerank."""
    return await _cohere(body, pick, job)


@router.post("/score", response_model=ScoreResponse, responses=errors(*INFERENCE_ERRORS),
             summary="Score text pairs, vLLM style")
@router.post("/v1/score", response_model=ScoreResponse, responses=errors(*INFERENCE_ERRORS),
             summary="Score text pairs, vLLM style (the same as /score)")
async def score(body: ScoreRequest, pick: PickDep, job: JobDep) -> Response:
    """vLLM's score: text_1 against each text_2 (one text_1), or pairwise (as many of each); `data` in input
    order, each the cross-encoder's sigmoid score."""
    served = pick(body.model, adapter=body.task)
    first, second = as_list(body.text_1), as_list(body.text_2)
    queries = first * len(second) if len(first) == 1 else first
    if len(queries) != len(second):
        raise InvalidRequest(f"text_1 has {len(first)} texts and text_2 {len(second)}: give one text_1, or as "
                             "many as text_2", code="mismatched_pairs")
    result, tokens = await job(core.score_pairs(served, list(zip(queries, second, strict=True)),
                                                truncate=body.truncate, direction=direction(body), function="sigmoid"))
    data = [{"index": i, "object": "score", "score": float(row[0])} for i, row in enumerate(result.values)]
    return json_response({"id": f"score-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
                          "model": body.model or served.name, "data": data,
                          "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}})


async def _cohere(body: CohereRerankRequest, pick: PickDep, job: JobDep) -> Response:
    served = pick(body.model, adapter=body.task)
    texts = [d if isinstance(d, str) else d.text for d in body.documents]
    ranking = await job(_rank(served, body.query, texts, body, False, None, "right"))
    results = [{"index": i, "relevance_score": float(ranking.scores[i]), **wire.rank_extras(ranking, i),
                **({"document": {"text": texts[i]}} if body.return_documents else {})}
               for i in ranking.order(body.top_n)]
    return json_response({
        "id": str(uuid.uuid4()), "results": results, "model": body.model or served.name,
        "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}},
        "usage": {"total_tokens": ranking.tokens},
    })


def _rank(served: ServedModel, query: str, texts: list[str], options: RerankOptions, raw: bool,
          truncate: bool | None, side: Any) -> Any:
    """The ranking; an overlap the request gives is held to the served OpenAPI document's bound whether or not
    it chunks (as /embed's is)."""
    overlap = rules.pair_overlap(served.bundle.tokenizer, given(options, "chunk_overlap"))
    chunked = core.PairChunking(overlap=overlap) if options.chunking == "max" else None
    return core.rerank(served, query, texts, truncate=truncate, direction=side, raw=raw, chunked=chunked,
                       explain=options.explain)
