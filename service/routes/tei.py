"""text-embeddings-inference compatible routes: POST /embed, /classify, /predict, /similarity, /embed_all,
/tokenize, /decode and POST / (embeddings, or sentence similarity: what `huggingface_hub.InferenceClient`
pointed at the server's root sends for feature_extraction and sentence_similarity)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response

from inference.postprocess import ScoreFunction
from inference.served import ServedModel
from inference.tasks import embed as core
from inference.tasks import rerank as pairs
from service import wire
from service.dependencies import Job, JobDep, ModelQuery, PickDep, needs, require_json
from service.hot import HotRoute
from service.images import ImageItem, fetching, image_inputs, refuse_text_fields
from service.routes.common import (
    INFERENCE_ERRORS,
    TOKENIZE_ERRORS,
    as_list,
    chunking,
    direction,
    errors,
    json_response,
)
from service.tei_schemas import (
    ClassificationWindow,
    ClassifyRequest,
    DecodeRequest,
    EmbedAllRequest,
    EmbeddingWindow,
    EmbedRequest,
    LabelScore,
    PredictRequest,
    SimilarityParameters,
    SimilarityRequest,
    Token,
    TokenizeRequest,
)
from service.uploads import Upload

router = APIRouter(tags=["text-embeddings-inference"], dependencies=[Depends(require_json)])
Embeddings = list[list[float]] | list[list[EmbeddingWindow]]


@router.post("/embed", response_model=Embeddings, responses=errors(*INFERENCE_ERRORS))
async def embed(body: EmbedRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """One embedding per input (pooled; L2-normalised unless normalize=false), of the text after the prompt
    `prompt_name` names (default: the model's default prompt); with chunking=windows, per input its windows, each
    with its span and embedding (every window read after the prompt)."""
    return json_response(await embed_answer(body, pick(body.model, model, adapter=body.task), job))


async def embed_answer(body: EmbedRequest, served: ServedModel, job: Job[Any]) -> Any:
    return await job(_embed(served, body))


@router.post("/classify", response_model=list[list[LabelScore]] | list[list[ClassificationWindow]],
             responses=errors(*INFERENCE_ERRORS), dependencies=[Depends(needs("classify"))])
async def classify(body: ClassifyRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """Per input, labels with scores, best first: softmax over the labels, or the sigmoid of a model's single
    logit (a cross-encoder's), or raw logits; with chunking=windows, per input its windows, each with its span
    and scores. An image classifier (ViTForImageClassification) is sent images, as /embed takes them."""
    return json_response(await classify_answer(body, pick(body.model, model, adapter=body.task), job))


async def classify_answer(body: ClassifyRequest, served: ServedModel, job: Job[Any]) -> Any:
    function: ScoreFunction | None = "none" if body.raw_scores else None
    images = await fetching(lambda: image_inputs(as_list(body.inputs), served.modalities))
    if images is not None:  # an image classifier's (ViTForImageClassification's)
        refuse_text_fields(body)
        scores = await job(core.classify_images(served, images, function=function))
        return [wire.labels(r) for r in scores.ranked(body.top_k)]
    chunked = chunking(body, served)
    result = await job(core.classify(served, as_list(body.inputs), truncate=body.truncate,
                                     direction=direction(body), function=function, chunked=chunked))
    if result.spans is not None:
        return wire.score_windows(result, body.top_k)
    return [wire.labels(r) for r in result.ranked(body.top_k)]


@router.post("/predict", response_model=list[LabelScore] | list[list[LabelScore]], responses=errors(*INFERENCE_ERRORS),
             dependencies=[Depends(needs("classify"))])
async def predict(body: PredictRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """TEI's classification: a text, [text] or a pair [text, text] gets one list of labels and scores, best
    first; a batch [[text], [text, text], ...] one list per input (pairs through the tokenizer's pair template).
    `parameters` (top_k, function_to_apply) is what `InferenceClient.text_classification` sends. An image
    classifier is sent `{"image": ...}` items (one, or a list: one list of labels per image)."""
    served = pick(body.model, model, adapter=body.task)
    parameters = body.parameters
    function = parameters.function_to_apply if parameters and parameters.function_to_apply else None
    function = function or ("none" if body.raw_scores else None)
    if isinstance(body.inputs, ImageItem) or (isinstance(body.inputs, list) and isinstance(body.inputs[0], ImageItem)):
        refuse_text_fields(body)
        images = await fetching(lambda: image_inputs(as_list(body.inputs), served.modalities))
        result = await job(core.classify_images(served, images or [], function=function))
        scores = [wire.labels(r) for r in result.ranked(parameters.top_k if parameters else None)]
        return json_response(scores[0] if isinstance(body.inputs, ImageItem) else scores)
    texts, single = _predict_texts(body.inputs)  # type: ignore[arg-type]  # texts and pairs: images answered above
    if any(isinstance(t, tuple) for t in texts):
        result, _ = await job(pairs.score_pairs(served, texts, truncate=body.truncate, direction=direction(body),
                                                function=function))
    else:
        result = await job(core.classify(served, texts, truncate=body.truncate, direction=direction(body),
                                         function=function))
    scores = [wire.labels(r) for r in result.ranked(parameters.top_k if parameters else None)]
    return json_response(scores[0] if single else scores)


@router.post("/similarity", response_model=list[float], responses=errors(*INFERENCE_ERRORS))
async def similarity(body: SimilarityRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """Cosine similarity of each of `inputs.sentences` with `inputs.source_sentence`, in order."""
    served = pick(body.model, model, adapter=body.task)
    return json_response(await job(_similarity(served, body)))


@router.post("/embed_all", response_model=list[list[list[float]]], responses=errors(*INFERENCE_ERRORS),
             dependencies=[Depends(needs("embed_all"))])
async def embed_all(body: EmbedAllRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """Per input, one vector per token (the encoder's last hidden states, special tokens included); refused
    (422) before any work when the response would pass ATTNSERVE_EMBED_ALL_CAP_BYTES."""
    served = pick(body.model, model, adapter=body.task)
    return json_response(await job(core.embed_all(
        served, as_list(body.inputs), truncate=body.truncate, direction=direction(body), prompt_name=body.prompt_name,
        instruction=body.instruction,
    )))


@router.post("/tokenize", response_model=list[list[Token]], responses=errors(*TOKENIZE_ERRORS))
async def tokenize(body: TokenizeRequest, pick: PickDep, model: ModelQuery = None) -> Response:
    """Per input, its tokens with ids and character offsets (no truncation)."""
    served = pick(body.model, model)
    listed = await core.tokenize(served, as_list(body.inputs), body.add_special_tokens)
    return json_response([wire.tokens(t) for t in listed])


@router.post("/decode", response_model=list[str], responses=errors(*TOKENIZE_ERRORS))
async def decode(body: DecodeRequest, pick: PickDep, model: ModelQuery = None) -> Response:
    """Per list of token ids, its text (special tokens left out unless skip_special_tokens=false)."""
    served = pick(body.model, model)
    sequences = [body.ids] if isinstance(body.ids[0], int) else body.ids
    return json_response(await core.decode(served, sequences, body.skip_special_tokens))  # type: ignore[arg-type]


@router.post("/", response_model=Embeddings | list[float], responses=errors(*INFERENCE_ERRORS),
             summary="Embed, or compare sentences (TEI's root)")
async def root(
    body: EmbedRequest | SimilarityRequest, pick: PickDep, job: JobDep, model: ModelQuery = None,
) -> Response:
    """`{"inputs": text or texts, ...}` is answered as /embed; `{"inputs": {"source_sentence", "sentences"}}`
    as /similarity."""
    served = pick(body.model, model, adapter=body.task)
    if isinstance(body, SimilarityRequest):
        return json_response(await job(_similarity(served, body)))
    return json_response(await job(_embed(served, body)))


# The batched routes answered on the short path when the request is well formed (service.hot).
HOT = (
    HotRoute("/embed", EmbedRequest, embed_answer),
    HotRoute("/classify", ClassifyRequest, classify_answer, task="classify"),
)
# The routes that take images uploaded as multipart/form-data, as their JSON request (service.uploads).
UPLOADS = (Upload("/embed", EmbedRequest, "inputs"), Upload("/classify", ClassifyRequest, "inputs"))


def _predict_texts(inputs: str | list[str] | list[list[str]]) -> tuple[list[Any], bool]:
    """The texts and pairs, and whether TEI answers with one list (a text, [text] or [text, text]) rather than
    one per input."""
    if isinstance(inputs, str):
        return [inputs], True
    if isinstance(inputs[0], str):
        return [_sequence(inputs)], True  # type: ignore[arg-type]
    return [_sequence(one) for one in inputs], False  # type: ignore[arg-type]


def _sequence(one: list[str]) -> str | tuple[str, str]:
    """TEI's sequence: [text] is a text, [text, text] a pair."""
    return one[0] if len(one) == 1 else (one[0], one[1])


async def _embed(served: ServedModel, body: EmbedRequest) -> Any:
    images = await fetching(lambda: image_inputs(as_list(body.inputs), served.modalities))
    if images is not None:
        refuse_text_fields(body)
        return (await core.embed_images(served, images, normalize=body.normalize, dimensions=body.dimensions)).vectors
    result = await core.embed(
        served, as_list(body.inputs), truncate=body.truncate, direction=direction(body), normalize=body.normalize,
        dimensions=body.dimensions, chunked=chunking(body, served), prompt_name=body.prompt_name,
        instruction=body.instruction,
    )
    return wire.embedding_windows(result) if result.spans is not None else result.vectors


async def _similarity(served: ServedModel, body: SimilarityRequest) -> Any:
    parameters = body.parameters or SimilarityParameters.model_validate({})
    compared = [body.inputs.source_sentence, *body.inputs.sentences]
    items = await fetching(lambda: image_inputs(compared, served.modalities))
    if items is not None:  # images (data URIs), and a two-tower model's texts beside them: one space
        refuse_text_fields(body)
        refuse_text_fields(parameters)
        vectors = (await core.embed_images(served, items)).vectors  # (1 + N, E) unit vectors
        return vectors[1:] @ vectors[0]
    return await core.similarity(
        served, body.inputs.source_sentence, body.inputs.sentences, truncate=parameters.truncate,
        direction=direction(parameters), prompt_name=parameters.prompt_name, instruction=parameters.instruction,
    )
