"""The OpenAPI document of what the served models accept: the routes' document, with the bounds that depend
on the models written in (from their manifests and tokenizers) and the routes no served model can answer
left out (they answer 404).

With several models served the bounds are the tightest of them, so that whatever the document accepts,
every model accepts: `dimensions` up to the embedding size, layer and head indices below the model's counts,
token ids below the vocabulary size, `chunk_overlap` below the chunking window (less the longest prompt),
`prompt_name` one of the prompts every model has, `task` one of the adapters every model has (only null when
some model has none), `instruction` only when every model takes one, and on /v2
the output names the models give; and from the settings, at most max_inputs inputs. What no document can state
stays a 422 naming its limit: an input too long for the model with truncation off, an answer over its cap, an
instruction beside a prompt_name or chunking, and on /v2 a tensor whose data does not fill its shape.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from inference import rules
from inference.chunking import pair_window, window_size
from inference.prompts import instruction_of, longest_prompt
from inference.registry import ModelRegistry
from service.uploads import Upload, form_schema

NEEDS = {"/classify": "classify", "/predict": "classify", "/attention": "attention", "/embed_all": "embed_all",
         **dict.fromkeys(("/rerank", "/v1/rerank", "/v2/rerank", "/score", "/v1/score"), "rerank"),
         "/embed_sparse": "sparse", "/classify_tokens": "tokens", "/v1/multi-vector": "multi_vector",
         "/maxsim": "multi_vector", "/zero-shot-image-classification": "zero_shot"}
INFER_PATHS = ("/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer")


@dataclass(frozen=True)
class Bounds:
    """The tightest sizes over the served models, and what any of them can be asked."""

    embedding: int  # the width of `embeddings`
    layers: int
    heads: int
    vocabulary: int
    window: int
    pair_window: int  # document tokens a chunked pair's window surely holds (after a query of the most tokens)
    overlap: int | None  # the chunk_overlap every model takes when a request names none (None: they differ)
    pair_overlap: int | None  # the same for chunked pairs
    tasks: frozenset[str]
    outputs: tuple[str, ...]  # /v2 output names
    prompts: tuple[str, ...]  # the prompt names every model has
    instructed: bool = False  # every model takes an `instruction`
    adapters: tuple[str, ...] = ()  # the adapter names (tasks) every model has
    modalities: frozenset[str] = frozenset({"text"})  # what the served models read: text, image


def bounds(models: ModelRegistry) -> Bounds:
    from service.oip.adapter import output_specs  # the protocol's own list of a model's outputs

    listed = list(models)
    manifests = [m.bundle.manifest for m in listed]
    outputs = dict.fromkeys(name for m in listed for name in output_specs(m))
    common = [name for name in manifests[0].prompts if all(name in m.prompts for m in manifests)]
    texts = [m for m in listed if m.bundle.text_tokenizer is not None]  # an image model has no text bounds
    windows = [window_size(m.bundle.tokenizer) - longest_prompt(m.bundle.manifest, m.bundle.tokenizer) for m in texts]
    pair_windows = [pair_window(m.bundle.tokenizer) for m in texts]
    return Bounds(
        min(m.embedding_size for m in manifests), min(m.num_layers for m in manifests),
        min(m.num_heads for m in manifests), min((m.bundle.tokenizer.vocab_size for m in texts), default=0),
        min(windows, default=0), min(pair_windows, default=0),
        _agreed([rules.text_overlap(m.bundle.tokenizer, m.bundle.manifest, None) for m in texts]),
        _agreed([rules.pair_overlap(m.bundle.tokenizer, None) for m in texts]),
        frozenset().union(*(m.tasks for m in listed)), tuple(outputs), tuple(common),
        all(instruction_of(m.prompts) is not None for m in manifests),
        tuple(name for name in listed[0].adapters if all(name in m.adapters for m in listed)),
        frozenset(modality for m in listed for modality in m.modalities),
    )


def _agreed(overlaps: list[int]) -> int | None:
    """The default chunk_overlap every model takes (`inference.rules`), or None when they differ (or none does)."""
    return overlaps[0] if len(set(overlaps)) == 1 else None


def answerable(path: str, tasks: Iterable[str]) -> bool:
    """Whether some served model can answer `path`."""
    return NEEDS.get(path, "embed") in set(tasks)


IMAGE_INPUTS = {"OpenAIEmbeddingRequest": "input", "EmbedRequest": "inputs",  # the inputs that may be images
                "AttentionRequest": "inputs", "ClassifyRequest": "inputs", "PredictRequest": "inputs"}
PROMPTED = {"EmbedRequest": "prompt_name", "OpenAIEmbeddingRequest": "prompt_name", "EmbedAllRequest": "prompt_name",
            "SimilarityParameters": "prompt_name"}
INSTRUCTED = ("EmbedRequest", "OpenAIEmbeddingRequest", "EmbedAllRequest", "SimilarityParameters")  # and /v2's
LISTS = {"EmbedRequest": "inputs", "ClassifyRequest": "inputs", "AttentionRequest": "inputs",
         "TokenizeRequest": "inputs", "EmbedAllRequest": "inputs", "PredictRequest": "inputs",
         "OpenAIEmbeddingRequest": "input", "DecodeRequest": "ids", "SimilarityInput": "sentences",
         "RerankRequest": "texts", "CohereRerankRequest": "documents", "ScoreRequest": "text_2",
         "EmbedSparseRequest": "inputs", "ClassifyTokensRequest": "inputs", "CohereEmbedRequest": "texts"}


def served_document(
    base: dict[str, Any], served: Bounds, max_inputs: int, uploads: Iterable[Upload] = (),
) -> dict[str, Any]:
    """`base` (the routes' document) as the served models accept it; `uploads` take multipart where they do."""
    doc = copy.deepcopy(base)
    doc["paths"] = {path: item for path, item in doc["paths"].items() if answerable(path, served.tasks)}
    schemas = doc["components"]["schemas"]
    for name, field in LISTS.items():
        if name in schemas:  # similarity: the source sentence is an input too
            _cap_lists(schemas[name]["properties"][field], max_inputs - (name == "SimilarityInput"))
    if "CohereEmbedRequest" in schemas:  # its images and its parts are inputs too
        for field in ("images", "inputs"):
            _cap_lists(schemas["CohereEmbedRequest"]["properties"][field], max_inputs)
    for name, field in (("EmbedRequest", "dimensions"), ("OpenAIEmbeddingRequest", "dimensions"),
                        ("CohereEmbedRequest", "output_dimension")):
        if name in schemas:
            _cap(schemas[name]["properties"][field], served.embedding)
    for name in ("EmbedRequest", "OpenAIEmbeddingRequest", "ClassifyRequest", "ClassifyTokensRequest"):
        if name in schemas:
            _overlap(schemas[name]["properties"]["chunk_overlap"], served.window, served.overlap)
    for name in ("RerankRequest", "CohereRerankRequest"):  # the query shares a pair's window
        if name in schemas:
            _overlap(schemas[name]["properties"]["chunk_overlap"], served.pair_window, served.pair_overlap)
    for name, field in IMAGE_INPUTS.items():
        if name in schemas:
            _modalities(schemas[name]["properties"][field], served.modalities)
    if "image" not in served.modalities:
        schemas.pop("ImageItem", None)
    else:
        _uploads(doc, uploads, max_inputs)
    if "CohereEmbedRequest" in schemas:
        _cohere_modalities(schemas, served.modalities)
    _modality_field(schemas, served.modalities)
    _cap(schemas["OpenAIEmbeddingRequest"]["properties"]["input"], served.vocabulary - 1)
    _cap(schemas["DecodeRequest"]["properties"]["ids"], served.vocabulary - 1)
    if "AttentionRequest" in schemas and "/attention" in doc["paths"]:
        _cap(schemas["AttentionRequest"]["properties"]["layers"], served.layers - 1)
        _cap(schemas["AttentionRequest"]["properties"]["heads"], served.heads - 1)
    for name, field in PROMPTED.items():
        if name in schemas:
            _prompt_names(schemas[name]["properties"][field], served.prompts)
    for name in INSTRUCTED:
        if name in schemas:
            _instruction(schemas[name]["properties"]["instruction"], served.instructed)
    for schema in schemas.values():
        if "task" in schema.get("properties", {}):  # every request that runs the model
            _prompt_names(schema["properties"]["task"], served.adapters)
    for path in INFER_PATHS:
        if path in doc["paths"]:
            _infer_body(doc["paths"][path]["post"]["requestBody"], served)
    return doc


def _uploads(doc: dict[str, Any], uploads: Iterable[Upload], max_inputs: int) -> None:
    """Where an image model is served, the upload routes take multipart/form-data beside JSON (service.uploads)."""
    for upload in uploads:
        if upload.path in doc["paths"]:
            content = doc["paths"][upload.path]["post"]["requestBody"]["content"]
            ref = content["application/json"]["schema"]["$ref"]
            request = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
            content["multipart/form-data"] = {"schema": form_schema(upload, ref, request, max_inputs)}


def _modalities(node: dict[str, Any], modalities: frozenset[str]) -> None:
    """The inputs of the modalities served: the list that holds images (ImageItem) only where an image model is
    served; texts as lists and token ids only where a text model is (an image model also takes one data URI)."""
    def holds_images(branch: Any) -> bool:
        return "ImageItem" in json.dumps(branch)

    node["anyOf"] = [b for b in node["anyOf"] if ("image" in modalities if holds_images(b) else
                                                 "text" in modalities or b.get("type") == "string")]


def _cohere_modalities(schemas: dict[str, Any], modalities: frozenset[str]) -> None:
    """Cohere's embed takes `texts`, `images` or `inputs`: where only one modality is served, `inputs` offers only
    its parts, the other modality's field is null only, one of the served one's field and `inputs` is given, and
    input_type offers only what goes with it (image with images)."""
    if len(modalities) != 1:
        return  # both: any field, as the request says
    given, other = ("images", "texts") if "image" in modalities else ("texts", "images")
    part = "CohereImage" if given == "images" else "CohereText"
    items = schemas["CohereInput"]["properties"]["content"]["items"]
    items["oneOf"] = [branch for branch in items["oneOf"] if branch["$ref"].endswith(f"/{part}")]
    items["discriminator"]["mapping"] = {k: v for k, v in items["discriminator"]["mapping"].items()
                                         if v.endswith(f"/{part}")}
    schemas.pop("CohereText" if part == "CohereImage" else "CohereImage", None)
    if part == "CohereText":
        schemas.pop("CohereImageUrl", None)
    schema = schemas["CohereEmbedRequest"]
    properties = schema["properties"]
    schema["oneOf"] = [_one_given(given, "inputs"), _one_given("inputs", given)]  # the request's own rule
    properties[other] = {"type": "null", "default": None, "description": properties[other].get("description", "")}
    for branch in properties["input_type"]["anyOf"]:
        if "enum" in branch:
            branch["enum"] = [v for v in branch["enum"] if (v == "image") == (given == "images")]


def _one_given(field: str, instead: str) -> dict[str, Any]:
    """A branch of "one of two nullable fields": `field` given, not null, and `instead` absent or null."""
    return {"required": [field], "properties": {field: {"not": {"type": "null"}}, instead: {"type": "null"}}}


def _modality_field(schemas: dict[str, Any], modalities: frozenset[str]) -> None:
    """Infinity's `modality` on /v1/embeddings offers only what the served models read."""
    node = schemas["OpenAIEmbeddingRequest"]["properties"]["modality"]
    for branch in node["anyOf"]:
        if "enum" in branch:
            branch["enum"] = [v for v in branch["enum"] if v in modalities]


def _cap(node: Any, most: int) -> None:
    """Every non-negative integer under `node` gets `maximum: most`."""
    if isinstance(node, dict):
        if node.get("type") == "integer":
            node["maximum"] = most
        for value in node.values():
            _cap(value, most)
    elif isinstance(node, list):
        for item in node:
            _cap(item, most)


def _prompt_names(node: dict[str, Any], names: tuple[str, ...]) -> None:
    """A prompt (or task) name is one of `names`, or null; with no name every model has, only null."""
    branches = [b for b in node["anyOf"] if b.get("type") != "string"]
    node["anyOf"] = [{"type": "string", "enum": list(names)}, *branches] if names else branches


def _instruction(node: dict[str, Any], instructed: bool) -> None:
    """An instruction is a string where every model takes one; else only null (some model takes none)."""
    if not instructed:
        node["anyOf"] = [b for b in node["anyOf"] if b.get("type") != "string"]


def _overlap(node: dict[str, Any], window: int, default: int | None) -> None:
    """A chunk_overlap field: below the tightest window, and its default the one every model takes (none stated
    when they differ: the description says how each model's is chosen)."""
    _cap(node, window - 1)
    if default is None:
        node.pop("default", None)
    else:
        node["default"] = default


def _cap_lists(node: dict[str, Any], most: int) -> None:
    """A list of inputs (of texts, of token-id lists, of [text]) gets `maxItems: most`; a token-id list that
    is one input does not."""
    for branch in node.get("anyOf", [node]):
        items = branch.get("items", {})
        if branch.get("type") == "array" and (items.get("type") in ("string", "array") or "anyOf" in items):
            branch["maxItems"] = min(branch.get("maxItems", most), most)


def _infer_body(body: dict[str, Any], served: Bounds) -> None:
    schema = body["content"]["application/json"]["schema"]
    names = _find(schema, "RequestedOutput")["properties"]["name"]
    names.pop("anyOf", None)
    names.update({"type": "string", "enum": list(served.outputs)})
    parameters = _find(schema, "InferParameters")["properties"]
    for key, count in (("layers", served.layers), ("heads", served.heads)):
        _cap(parameters[key], count - 1)
        _index_pattern(parameters[key], count)
    _prompt_names(parameters["prompt_name"], served.prompts)
    _prompt_names(parameters["task"], served.adapters)
    _instruction(parameters["instruction"], served.instructed)


def _index_pattern(node: Any, count: int) -> None:
    """A string of comma-separated indices, each below `count`."""
    one = "|".join(str(i) for i in range(count))
    for branch in node.get("anyOf", []):
        if branch.get("type") == "string":
            branch["pattern"] = f"^({one})(,({one}))*$"


def _find(schema: dict[str, Any], title: str) -> dict[str, Any]:
    """The sub-schema titled `title` (inline_schema writes the $defs in place)."""
    if schema.get("title") == title:
        return schema
    for value in schema.values():
        nodes = value if isinstance(value, list) else [value]
        for node in nodes:
            if isinstance(node, dict) and (found := _find_or_none(node, title)) is not None:
                return found
    raise KeyError(title)


def _find_or_none(schema: dict[str, Any], title: str) -> dict[str, Any] | None:
    try:
        return _find(schema, title)
    except KeyError:
        return None
