"""What a caller may ask of a served model: embeddings, label scores, similarity, per-token vectors, tokens
and decoded text, answered in the types of `inference.results`. Each goes through `ServedModel.run` (or
`run_windows` when chunked), so through the same checks, admission, batching, caps and errors.

Shape letters: N inputs, K windows of all inputs, D hidden (D' after `dimensions`), C labels, n real tokens
of one input.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from inference import chunking, postprocess
from inference.chunking import Chunking
from inference.errors import NoInstruction, Unsupported
from inference.limits import Inputs, check_dimensions, check_embed_all_size, check_inputs
from inference.prompts import InputType, prompt_text
from inference.results import Embeddings, Scores, Span, Token
from inference.runtime.graphs import FAST, TOKENS
from inference.runtime.tokenize import Direction, Encoded
from inference.served import ServedModel, all_or_none


async def embed(
    model: ServedModel, inputs: Inputs, *, truncate: bool | None = None, direction: Direction = "right",
    normalize: bool = True, dimensions: int | None = None, chunked: Chunking | None = None,
    prompt_name: str | None = None, input_type: InputType | None = None, instruction: str | None = None,
) -> Embeddings:
    """Pooled vectors, L2-normalised when asked, cut to `dimensions` (then renormalised). Chunked: per input
    the token-weighted mean of its windows' vectors (before normalisation), or every window's vector. Texts
    get the prompt that `instruction`, `prompt_name`, `input_type`, the model's adapter (a prompt named like it)
    or the model's default chooses (`inference.prompts`)."""
    check_dimensions(dimensions, model.bundle.manifest.embedding_size)
    if instruction is not None and chunked is not None:  # windows keep room for the model's prompts, not for it
        raise NoInstruction("an instruction cannot be given with chunking; send the text truncated, or use the "
                            "model's query prompt (input_type query)")
    prompt = prompt_text(model.bundle.manifest, prompt_name, input_type, instruction, model.adapter)
    values, tokens, spans = await _pooled(model, inputs, "embeddings", truncate, direction, chunked, prompt)
    return Embeddings(postprocess.embeddings(values, normalize, dimensions), tokens, spans)


async def embed_images(
    model: ServedModel, items: Sequence[bytes | str], *, normalize: bool = True, dimensions: int | None = None,
) -> Embeddings:
    """An image model's pooled vectors, one per image (its bytes: PNG, JPEG, WebP or GIF), prepared by the bundle's
    steps; L2-normalised when asked, cut to `dimensions` (then renormalised). The tokens run are the images'. A
    two-tower model's images go to its image tower, and its texts among them (str items, Jina's mixed inputs) to its
    text tower, each with its default prompt: both into the one space, answered in the items' order."""
    tower = model.for_images()
    check_dimensions(dimensions, tower.bundle.manifest.embedding_size)
    images = [item for item in items if isinstance(item, bytes)]
    texts = [item for item in items if isinstance(item, str)]
    runs = [_image_vectors(tower, images)] if images else []
    if texts:
        prompt = prompt_text(model.bundle.manifest, None, None, None, model.adapter)
        runs.append(_pooled(model, texts, "embeddings", None, "right", None, prompt))
    done = iter(await all_or_none(runs))
    image_values, image_tokens, _ = next(done) if images else (None, 0, None)
    text_values, text_tokens, _ = next(done) if texts else (None, 0, None)
    rows = _in_order(items, image_values, text_values)  # (N, D)
    return Embeddings(postprocess.embeddings(rows, normalize, dimensions), image_tokens + text_tokens, None)


async def _image_vectors(
    model: ServedModel, images: Sequence[bytes],
) -> tuple[np.ndarray, int, list[list[Span]] | None]:
    """(N, D) pooled vectors of the images, and their tokens (an image model's max_length: its tokens per image)."""
    outputs = (await model.run_images(images, [FAST]))[FAST]
    return np.stack([o["embeddings"] for o in outputs]), len(images) * model.bundle.manifest.max_length, None


def _in_order(items: Sequence[bytes | str], images: np.ndarray | None, texts: np.ndarray | None) -> np.ndarray:
    """The images' rows and the texts' rows interleaved back into the items' order (N, D)."""
    rows = {bytes: iter(images if images is not None else ()), str: iter(texts if texts is not None else ())}
    return np.stack([next(rows[type(item)]) for item in items])


async def classify(
    model: ServedModel, inputs: Inputs, *, truncate: bool | None = None, direction: Direction = "right",
    function: postprocess.ScoreFunction | None = None, chunked: Chunking | None = None,
) -> Scores:
    """Scores over the model's labels per input (or per window), from logits pooled as `embed` pools; by
    `function`, or by default softmax over several labels and sigmoid of one (`postprocess.default_function`)."""
    labels = require_labels(model)
    values, _, spans = await _pooled(model, inputs, "logits", truncate, direction, chunked, prompt="")
    return Scores(postprocess.scores(values, function), labels, spans)


async def classify_images(
    model: ServedModel, images: Sequence[bytes | str], *, function: postprocess.ScoreFunction | None = None,
) -> Scores:
    """An image classifier's (ViTForImageClassification's) scores over its labels per image, by `function` as
    `classify` scores texts."""
    tower = model.for_images()
    labels = require_labels(tower)
    if any(isinstance(item, str) for item in images):
        raise Unsupported(f"model {model.name} classifies images only; send each input as an image")
    outputs = (await tower.run_images(images, [FAST]))[FAST]  # type: ignore[arg-type]  # bytes only, checked above
    return Scores(postprocess.scores(np.stack([o["logits"] for o in outputs]), function), labels, None)


async def similarity(
    model: ServedModel, source: str, sentences: Sequence[str], *, truncate: bool | None = None,
    direction: Direction = "right", prompt_name: str | None = None, instruction: str | None = None,
) -> np.ndarray:
    """(N,) cosine similarity of each sentence's embedding with the source sentence's (all with one prompt)."""
    vectors = (await embed(model, [source, *sentences], truncate=truncate, direction=direction,
                           prompt_name=prompt_name, instruction=instruction)).vectors
    return vectors[1:] @ vectors[0]  # (N,) unit vectors: dot product = cosine


async def embed_all(
    model: ServedModel, inputs: Inputs, *, truncate: bool | None = None, direction: Direction = "right",
    prompt_name: str | None = None, instruction: str | None = None,
) -> list[np.ndarray]:
    """Per input, (n, D) token vectors (the encoder's last hidden states, special tokens and a prompt's tokens
    included); refused before any graph runs when the answer would pass embed_all_cap_bytes."""
    model.require("embed_all", "give token vectors (its fast graph has no token_embeddings output)")
    hidden = model.bundle.manifest.hidden_size
    prompt = prompt_text(model.bundle.manifest, prompt_name, instruction=instruction, adapter=model.adapter)
    _, outputs = await model.run(inputs, [TOKENS], truncate, direction, prompt=prompt,
                                 check=lambda encoded: check_embed_all_size(model.limits, encoded, hidden))
    return [o["token_embeddings"] for o in outputs[TOKENS]]


async def tokenize(model: ServedModel, inputs: Sequence[str], add_special_tokens: bool = True) -> list[list[Token]]:
    """Per input, its tokens with ids and character offsets (no truncation, nothing run)."""
    check_inputs(model.limits, inputs)
    tokenizer = model.bundle.tokenizer
    encoded = await model.maybe_off_loop(inputs, tokenizer.encode_plain, inputs, add_special_tokens)
    return [tokens(e) for e in encoded]


async def decode(model: ServedModel, sequences: Sequence[Sequence[int]], skip_special_tokens: bool = True) -> list[str]:
    check_inputs(model.limits, sequences)
    return await model.maybe_off_loop(sequences, model.bundle.tokenizer.decode, sequences, skip_special_tokens)


def tokens(encoded: Encoded) -> list[Token]:
    e = encoded
    return [Token(int(i), t, a, b, s)
            for i, t, (a, b), s in zip(e.ids.tolist(), e.tokens, e.offsets, e.special, strict=True)]


def require_labels(model: ServedModel) -> list[str]:
    model.require("classify", "classify (it has no classification head)")
    return list(model.bundle.manifest.labels)


async def _pooled(
    model: ServedModel, inputs: Inputs, name: str, truncate: bool | None, direction: Direction,
    chunked: Chunking | None, prompt: str,
) -> tuple[np.ndarray, int, list[list[Span]] | None]:
    """The fast graph's `name` output (N, D) per input, or chunked: pooled over each input's windows (N, D),
    or one row per window (K, D) with the windows' spans; and the tokens run (a prompt's included)."""
    if chunked is None:
        encoded, outputs = await model.run(inputs, [FAST], truncate, direction, prompt=prompt)
        return np.stack([o[name] for o in outputs[FAST]]), sum(e.length for e in encoded), None
    windows, grouped = await model.run_windows(inputs, chunked.overlap, prompt)
    tokens_run = sum(w.length for ws in windows for w in ws)
    values = [np.stack([o[name] for o in outs]) for outs in grouped]  # per input (K_i, D)
    if chunked.mode == "mean":
        return np.stack([chunking.pool(v, ws) for v, ws in zip(values, windows, strict=True)]), tokens_run, None
    spans = [[Span(w.start, w.stop, w.tokens) for w in ws] for ws in windows]
    return np.concatenate(values), tokens_run, spans
