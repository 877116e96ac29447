"""What the Open Inference Protocol's tensors mean for a served model: its metadata, which inputs it takes,
which outputs it gives, and one inference request as one core call. Plain asyncio + numpy; the wire format
is `service.oip.codec`'s, the HTTP side `service.oip.routes`'.

Shape letters: N inputs, T the longest input's tokens, D hidden, C labels, l layers, h heads.

Inputs: `text` (BYTES [N]), or `input_ids` (INT64/INT32 [N, T]) with an optional `attention_mask` (same
shape; a row's ids where the mask is 1, used as given). Outputs: `embeddings` FP32 [N, D] (as
/v1/embeddings: normalised as the manifest says unless `normalize` says otherwise), `logits` and `scores`
(softmax; the sigmoid of a single label's logit) FP32 [N, C] in the manifest's label order, `attentions`
FP32 (as /attention, over real tokens, padded with zeros to T: [N, l, h, T, T], [N, l, T, T] or [N, T, T] by
aggregation), `sparse` FP32 [N, V] for a masked-LM bundle (SPLADE, as /embed_sparse, dense) and
`attention_mask` INT64 [N, T] (1 on each input's real tokens, to unpad the attentions).
Text inputs get the model's prompt as on /embed (`instruction`, else `prompt_name`, else the prompt named like
the request's `task`, else its default). The `task` parameter (or a `base:task` model name) runs the model's
LoRA adapter of that name.
One request is one call of `inference.tasks.attention.graph_outputs`: admitted and tokenised once, every cap
checked before any graph runs, through the same batching, limits and errors as every route.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from attnserve import __version__
from inference import postprocess
from inference.errors import InvalidRequest, ModelNotFound
from inference.limits import AttentionQuery, Inputs
from inference.prompts import prompt_text
from inference.registry import quoted
from inference.runtime.graphs import SPARSE
from inference.served import ServedModel
from inference.tasks import attention, multi_vector, sparse
from service.oip.codec import Tensor
from service.oip.schemas import InferParameters, InferRequest, index_list

PLATFORM = "onnx_onnxv1"
EXTENSIONS = ["binary_tensor_data"]
FAST_OUTPUTS = ("embeddings", "logits", "scores")
MULTI_OUTPUTS = ("sparse", "multi_vectors", "multi_vector_mask")  # a multi-vector model's: inference.tasks.multi_vector


def server_metadata() -> dict[str, object]:
    return {"name": "attnserve", "version": __version__, "extensions": EXTENSIONS}


def check_version(served: ServedModel, version: str | None) -> None:
    current = served.bundle.manifest.version
    if version is not None and version != current:
        raise ModelNotFound(f"model {served.name} has no version {quoted(version)}; the served version is {current!r}")


def model_metadata(served: ServedModel) -> dict[str, object]:
    return {
        "name": served.name, "versions": [served.bundle.manifest.version], "platform": PLATFORM,
        "inputs": [
            {"name": "text", "datatype": "BYTES", "shape": [-1]},
            {"name": "input_ids", "datatype": "INT64", "shape": [-1, -1]},
            {"name": "attention_mask", "datatype": "INT64", "shape": [-1, -1]},
        ],
        "outputs": [{"name": name, "datatype": datatype, "shape": shape}
                    for name, (datatype, shape) in output_specs(served).items()],
    }


def output_specs(served: ServedModel) -> dict[str, tuple[str, list[int]]]:
    """The outputs this model gives: name -> (datatype, shape)."""
    m = served.bundle.manifest
    specs = {"embeddings": ("FP32", [-1, m.embedding_size])}
    if "classify" in served.tasks:
        specs |= {"logits": ("FP32", [-1, len(m.labels)]), "scores": ("FP32", [-1, len(m.labels)])}
    if "sparse" in served.tasks:  # SPLADE, or a multi-vector model's lexical weights, as /embed_sparse (dense)
        specs["sparse"] = ("FP32", [-1, int(m.model_config_["vocab_size"])])
    if "multi_vector" in served.tasks and m.multi_vector is not None:  # as /v1/multi-vector, zero-padded
        specs |= {"multi_vectors": ("FP32", [-1, -1, m.multi_vector.size]), "multi_vector_mask": ("INT64", [-1, -1])}
    if "attention" in served.bundle.graphs:
        specs["attentions"] = ("FP32", [-1, -1, -1, -1, -1])
    specs["attention_mask"] = ("INT64", [-1, -1])
    return specs


async def infer(served: ServedModel, request: InferRequest, tensors: dict[str, np.ndarray]) -> list[Tensor]:
    """The requested outputs, in the order asked for (default: the fast graph's)."""
    served = served.with_adapter(request.parameters.task)
    inputs, wanted = model_inputs(tensors), requested(served, request)
    params, names = request.parameters, {name for name, _ in wanted}
    if served.multi_outputs and names & set(MULTI_OUTPUTS):
        return await _multi(served, inputs, wanted, params)
    direction: Literal["left", "right"] = "left" if params.truncation_direction.lower() == "left" else "right"
    attention.check_indices(served, index_list(params.layers), index_list(params.heads))  # asked for or not
    query = None
    if "attentions" in names:
        binary = next(b for name, b in wanted if name == "attentions")
        query = AttentionQuery(index_list(params.layers), index_list(params.heads), params.aggregation,  # type: ignore[arg-type]
                               "binary" if binary else "float", "float32")
    views = [SPARSE] if "sparse" in names else []
    fast = bool(names & set(FAST_OUTPUTS)) or (query is None and not views)
    prompt = prompt_text(served.bundle.manifest, params.prompt_name, instruction=params.instruction,
                         adapter=served.adapter)
    result = await attention.graph_outputs(served, inputs, fast=fast, query=query, truncate=params.truncate,
                                           direction=direction, views=views, prompt=prompt)
    values = {"attention_mask": _mask(result.lengths)}
    if fast:
        values |= _fast_values(served, result.values, params)
    if views:
        values["sparse"] = result.values["sparse"].astype(np.float32)  # (N, V)
    if result.attention is not None:
        values["attentions"] = _padded([m.values for m in result.attention], result.lengths)
    specs = output_specs(served)
    return [Tensor(name, specs[name][0], values[name], binary) for name, binary in wanted]


async def _multi(served: ServedModel, inputs: Inputs, wanted: list[tuple[str, bool]],
                 params: InferParameters) -> list[Tensor]:
    """A multi-vector model's outputs of one run (inference.tasks.multi_vector): embeddings, sparse (dense over the
    vocabulary),
    multi_vectors (zero-padded to the most kept tokens) with multi_vector_mask, attention_mask. Attention maps are
    not of that run: ask for them in a request of their own."""
    names = {name for name, _ in wanted}
    if "attentions" in names:
        raise InvalidRequest("attentions cannot be asked for with a multi-vector model's sparse or multi_vectors "
                             "outputs (they are of another run): ask for them in a request of their own")
    asked = {"embeddings": "dense", "sparse": "sparse", "multi_vectors": "multi", "multi_vector_mask": "multi"}
    direction: Literal["left", "right"] = "left" if params.truncation_direction.lower() == "left" else "right"
    found = await multi_vector.encode(served, inputs, input_type=params.input_type, truncate=params.truncate,
                                      direction=direction, normalize=params.normalize,
                                      outputs={asked[n] for n in names if n in asked})  # type: ignore[misc]
    values = {"attention_mask": _mask(found.lengths)}
    if found.dense is not None:
        values["embeddings"] = found.dense
    if found.sparse is not None:
        vocabulary = int(served.bundle.manifest.model_config_["vocab_size"])
        values["sparse"] = np.stack([sparse.dense(v, vocabulary) for v in found.sparse])  # (N, V)
    if found.multi is not None:
        counts = [len(v) for v in found.multi]
        values["multi_vector_mask"] = _mask(counts) if max(counts) else np.zeros((len(counts), 0), dtype=np.int64)
        padded = np.zeros((len(counts), max(counts), served.bundle.manifest.multi_vector.size),  # type: ignore[union-attr]
                          dtype=np.float32)  # (N, K, M)
        for row, vectors in enumerate(found.multi):
            padded[row, :len(vectors)] = vectors
        values["multi_vectors"] = padded
    specs = output_specs(served)
    return [Tensor(name, specs[name][0], values[name], binary) for name, binary in wanted]


def model_inputs(tensors: dict[str, np.ndarray]) -> Inputs:
    """Texts, or token-id lists, from the request's input tensors."""
    if ("text" in tensors) == ("input_ids" in tensors):
        raise InvalidRequest("the inputs are `text` (BYTES [n]) or `input_ids` (INT64 [n, T]) with an optional "
                             f"`attention_mask`; got {', '.join(sorted(tensors))}")
    if "text" in tensors:
        return _texts(tensors)
    return _token_ids(tensors)


def requested(served: ServedModel, request: InferRequest) -> list[tuple[str, bool]]:
    """(name, binary) of each requested output; unknown or repeated names are refused."""
    specs, default_binary = output_specs(served), request.parameters.binary_data_output
    if request.outputs is None:
        return [(name, default_binary) for name in FAST_OUTPUTS if name in specs]
    names = [out.name for out in request.outputs]
    for name in names:
        if name not in specs:
            raise InvalidRequest(f"unknown output {name!r}; this model gives {', '.join(specs)}")
        if names.count(name) > 1:
            raise InvalidRequest(f"output {name!r} is requested twice")
    return [(out.name, _binary(out.parameters, default_binary)) for out in request.outputs]


def _binary(parameters: object, default: bool) -> bool:
    chosen = getattr(parameters, "binary_data", None)
    return default if chosen is None else bool(chosen)


def _texts(tensors: dict[str, np.ndarray]) -> list[str]:
    if "attention_mask" in tensors:
        raise InvalidRequest("attention_mask goes with input_ids, not with text")
    texts = tensors["text"]
    if texts.dtype != object or not (texts.ndim == 1 or (texts.ndim == 2 and texts.shape[1] == 1)):
        raise InvalidRequest("input `text` must be BYTES of shape [n] (or [n, 1])")
    return texts.reshape(-1).tolist()  # type: ignore[no-any-return]


def _token_ids(tensors: dict[str, np.ndarray]) -> list[list[int]]:
    ids, mask = tensors["input_ids"], tensors.get("attention_mask")
    if ids.dtype == object or ids.ndim != 2:
        raise InvalidRequest("input `input_ids` must be INT64 or INT32 of shape [n, T]")
    if mask is None:
        return ids.tolist()  # type: ignore[no-any-return]
    if mask.dtype == object or mask.shape != ids.shape or not np.isin(mask, (0, 1)).all():
        raise InvalidRequest("input `attention_mask` must be INT64 or INT32 0s and 1s of input_ids' shape")
    return [row[keep == 1].tolist() for row, keep in zip(ids, mask, strict=True)]


def _fast_values(served: ServedModel, raw: dict[str, np.ndarray], params: InferParameters) -> dict[str, np.ndarray]:
    normalize = served.bundle.manifest.normalize if params.normalize is None else params.normalize
    values = {"embeddings": postprocess.embeddings(raw["embeddings"], normalize, None)}  # (N, D)
    if "logits" in raw:
        logits = raw["logits"].astype(np.float32)  # (N, C)
        values |= {"logits": logits, "scores": postprocess.scores(logits).astype(np.float32)}
    return values


def _mask(lengths: Sequence[int]) -> np.ndarray:
    """(N, T): 1 on each input's real tokens."""
    return (np.arange(max(lengths))[None, :] < np.asarray(lengths)[:, None]).astype(np.int64)


def _padded(maps: Sequence[np.ndarray], lengths: Sequence[int]) -> np.ndarray:
    """Per-input maps (..., n, n) -> (N, ..., T, T), zero beyond each input's n tokens."""
    longest = max(lengths)
    out = np.zeros((len(maps), *maps[0].shape[:-2], longest, longest), dtype=np.float32)  # (N, ..., T, T)
    for index, (one, n) in enumerate(zip(maps, lengths, strict=True)):
        out[index, ..., :n, :n] = one
    return out
