"""text-embeddings-inference compatible routes: POST /embed, /classify, /predict, /similarity, /embed_all,
/tokenize, /decode and POST / (embeddings, or sentence similarity: what `huggingface_hub.InferenceClient`
pointed at the server's root sends for feature_extraction and sentence_similarity)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response

from service.dependencies import JobDep, ModelQuery, PickDep, require_json
from service.engine import Engine
from service.postprocess import ScoreFunction
from service.routes.common import (
    INFERENCE_ERRORS,
    TOKENIZE_ERRORS,
    as_list,
    direction,
    errors,
    json_response,
    pooled_overlap,
)
from service.schemas import (
    ClassificationWindow,
    ClassifyRequest,
    DecodeRequest,
    EmbedAllRequest,
    EmbeddingWindow,
    EmbedRequest,
    LabelScore,
    PredictRequest,
    SimilarityRequest,
    Token,
    TokenizeRequest,
    TruncationFields,
)

router = APIRouter(tags=["text-embeddings-inference"], dependencies=[Depends(require_json)])
Embeddings = list[list[float]] | list[list[EmbeddingWindow]]


@router.post("/embed", response_model=Embeddings, responses=errors(*INFERENCE_ERRORS))
async def embed(body: EmbedRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """One embedding per input (pooled; L2-normalised unless normalize=false); with chunking=windows, per
    input its windows, each with its span and embedding."""
    engine = pick(body.model, model)
    return json_response(await job(_embed(engine, body)))


@router.post("/classify", response_model=list[list[LabelScore]] | list[list[ClassificationWindow]],
             responses=errors(*INFERENCE_ERRORS))
async def classify(body: ClassifyRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """Per input, labels with scores (softmax, or raw logits), best first; with chunking=windows, per input
    its windows, each with its span and scores."""
    engine = pick(body.model, model)
    function: ScoreFunction = "none" if body.raw_scores else "softmax"
    if body.chunking == "windows":
        work = engine.classify_windows(as_list(body.inputs), overlap=body.chunk_overlap, top_k=body.top_k,
                                       scores=function)
    else:
        work = engine.classify(as_list(body.inputs), truncate=body.truncate, direction=direction(body),
                               top_k=body.top_k, scores=function, overlap=pooled_overlap(body))
    return json_response(await job(work))


@router.post("/predict", response_model=list[LabelScore] | list[list[LabelScore]], responses=errors(*INFERENCE_ERRORS))
async def predict(body: PredictRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """TEI's classification: a text gets one list of labels and scores, best first; a batch [[text], ...] one
    list per input. `parameters` (top_k, function_to_apply) is what `InferenceClient.text_classification` sends."""
    engine = pick(body.model, model)
    texts, single = _predict_texts(body.inputs)
    parameters = body.parameters
    function = parameters.function_to_apply if parameters and parameters.function_to_apply else None
    scores = await job(engine.classify(
        texts, truncate=body.truncate, direction=direction(body), top_k=parameters.top_k if parameters else None,
        scores=function or ("none" if body.raw_scores else "softmax"),
    ))
    return json_response(scores[0] if single else scores)


@router.post("/similarity", response_model=list[float], responses=errors(*INFERENCE_ERRORS))
async def similarity(body: SimilarityRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """Cosine similarity of each of `inputs.sentences` with `inputs.source_sentence`, in order."""
    engine = pick(body.model, model)
    return json_response(await job(_similarity(engine, body)))


@router.post("/embed_all", response_model=list[list[list[float]]], responses=errors(*INFERENCE_ERRORS))
async def embed_all(body: EmbedAllRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """Per input, one vector per token (the encoder's last hidden states, special tokens included); refused
    (422) before any work when the response would pass ATTNSERVE_EMBED_ALL_CAP_BYTES."""
    engine = pick(body.model, model)
    return json_response(await job(engine.embed_all(
        as_list(body.inputs), truncate=body.truncate, direction=direction(body),
    )))


@router.post("/tokenize", response_model=list[list[Token]], responses=errors(*TOKENIZE_ERRORS))
async def tokenize(body: TokenizeRequest, pick: PickDep, model: ModelQuery = None) -> Response:
    """Per input, its tokens with ids and character offsets (no truncation)."""
    engine = pick(body.model, model)
    return json_response(await engine.tokenize(as_list(body.inputs), body.add_special_tokens))


@router.post("/decode", response_model=list[str], responses=errors(*TOKENIZE_ERRORS))
async def decode(body: DecodeRequest, pick: PickDep, model: ModelQuery = None) -> Response:
    """Per list of token ids, its text (special tokens left out unless skip_special_tokens=false)."""
    engine = pick(body.model, model)
    sequences = [body.ids] if isinstance(body.ids[0], int) else body.ids
    return json_response(await engine.decode(sequences, body.skip_special_tokens))  # type: ignore[arg-type]


@router.post("/", response_model=Embeddings | list[float], responses=errors(*INFERENCE_ERRORS),
             summary="Embed, or compare sentences (TEI's root)")
async def root(
    body: EmbedRequest | SimilarityRequest, pick: PickDep, job: JobDep, model: ModelQuery = None,
) -> Response:
    """`{"inputs": text or texts, ...}` is answered as /embed; `{"inputs": {"source_sentence", "sentences"}}`
    as /similarity."""
    engine = pick(body.model, model)
    if isinstance(body, SimilarityRequest):
        return json_response(await job(_similarity(engine, body)))
    return json_response(await job(_embed(engine, body)))


def _predict_texts(inputs: str | list[str] | list[list[str]]) -> tuple[list[str], bool]:
    """The texts, and whether TEI answers with one list (a text, or [text]) rather than one per input."""
    if isinstance(inputs, str):
        return [inputs], True
    if isinstance(inputs[0], str):
        return [inputs[0]], True
    return [one[0] for one in inputs], False  # type: ignore[index]


async def _embed(engine: Engine, body: EmbedRequest) -> Any:
    inputs = as_list(body.inputs)
    if body.chunking == "windows":
        windows, _ = await engine.embed_windows(
            inputs, overlap=body.chunk_overlap, normalize=body.normalize, dimensions=body.dimensions,
        )
        return windows
    vectors, _ = await engine.embed(
        inputs, truncate=body.truncate, direction=direction(body), normalize=body.normalize,
        dimensions=body.dimensions, overlap=pooled_overlap(body),
    )
    return vectors


async def _similarity(engine: Engine, body: SimilarityRequest) -> Any:
    parameters = body.parameters or TruncationFields.model_validate({})
    return await engine.similarity(
        body.inputs.source_sentence, body.inputs.sentences, truncate=parameters.truncate,
        direction=direction(parameters),
    )
