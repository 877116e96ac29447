"""`--outputs dense,sparse,multi`: a multi-vector bundle's outputs (bge-m3's dense vector, lexical weights and token
vectors; a ColBERT model's token vectors) written from one run of the fast graph per batch.

The graph fetches `embeddings`, `multi_vectors` and `token_weights` as the outputs asked for need them; the
arithmetic is the core's (inference.tasks.multi_vector_scores, inference.tasks.sparse.lexical), so the rows equal what
inference.tasks.multi_vector.encode answers. A ColBERT bundle's texts are fed as its references feed them
(inference.tasks.multi_vector_feeds.ColbertFeeder: marker ids, queries expanded with [MASK]s that are fed but not
attended); --input-type says whether the texts are queries or documents (documents by default).

Shape letters: N texts, D pooled width, n tokens of one text, k kept tokens of one text, M token-vector width.
"""

from __future__ import annotations

import numpy as np

from bundle.manifest import Manifest
from bundle.multi_vector import MultiVectorSpec
from inference import postprocess
from inference.runtime.graphs import Graph, TokenSequence
from inference.runtime.loading import LoadedBundle
from inference.tasks import multi_vector_feeds, multi_vector_scores
from inference.tasks.multi_vector import OUTPUTS, fed
from inference.tasks.sparse import lexical
from jobs.batched import TOKENIZE_ROWS, Batching, finite, run_batched, tokenize
from jobs.options import JobError, JobOutput, OnBatch, adapter_of
from jobs.tables import MULTI_DTYPES

INPUT_TYPES = ("query", "document")
GRAPH_OUTPUTS = {"dense": "embeddings", "sparse": "token_weights", "multi": "multi_vectors"}  # what each needs


def parse_outputs(text: str) -> tuple[str, ...]:
    """'dense,sparse,multi' -> the names in OUTPUTS order; JobError for an unknown or missing name."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in OUTPUTS]
    if unknown or not names:
        raise JobError(f"--outputs: {', '.join(repr(n) for n in unknown) or 'nothing'} given; name one or more of "
                       f"{', '.join(OUTPUTS)}, comma separated")
    return tuple(name for name in OUTPUTS if name in names)


def check(manifest: Manifest, output: JobOutput) -> None:
    """JobError when --outputs (or its flags) ask what the bundle or the other flags cannot give."""
    if output.outputs is None:
        if output.multi_dtype != "float32" or output.input_type != "document":
            raise JobError("--multi-dtype and --input-type go with --outputs (a multi-vector bundle's outputs)")
        return
    if output.sparse:
        raise JobError("--sparse does not go with --outputs: ask for --outputs ...,sparse (a multi-vector model's "
                       "lexical weights) or --sparse alone (a masked-LM bundle's SPLADE vector)")
    if output.chunking is not None or output.classify:
        raise JobError("--outputs does not go with --chunking or --classify: multi-vector outputs are per document")
    if output.prompt_name is not None or output.instruction is not None:  # the model's own prefixes are used
        raise JobError("--outputs does not go with --prompt-name or --instruction: a multi-vector model's texts get "
                       "its own query or document prefix (--input-type)")
    if output.multi_dtype not in MULTI_DTYPES or output.input_type not in INPUT_TYPES:
        raise JobError(f"--multi-dtype is one of {', '.join(MULTI_DTYPES)}; --input-type one of query, document")
    given = {o.name for g in manifest.graphs if g.kind == "fast" for o in g.outputs}
    for name in output.outputs:
        if name != "dense" and (manifest.multi_vector is None or GRAPH_OUTPUTS[name] not in given):
            raise JobError(f"--outputs {name}: model {manifest.name}'s graph has no {GRAPH_OUTPUTS[name]} output "
                           "(not a multi-vector bundle, or not one with that output)")
        if name == "multi" and manifest.multi_vector is not None and manifest.multi_vector.size == 0:
            raise JobError(f"--outputs multi: model {manifest.name} has token weights only, no token vectors")


def embed(bundle: LoadedBundle, texts: list[str], output: JobOutput, batching: Batching,
          on_batch: OnBatch | None = None) -> dict[str, object]:
    """Per text the outputs asked for, from one graph run per batch: embeddings (N, D) float32, sparse (its lexical
    weights), multi (its (k, M) float32 token vectors), and tokens (N,) int32, the tokens run."""
    assert output.outputs is not None  # windows.embed sends only --outputs jobs here
    spec = _spec(bundle)
    document = output.input_type == "document"
    sequences, ids, keep = _sequences(bundle, texts, spec, document)
    results: list[dict[str, np.ndarray]] = [{}] * len(sequences)
    graph = _graph(bundle, output.outputs)
    for batch in run_batched(bundle, sequences, batching, graph, adapter_of(bundle.manifest, output)):
        for index, result in batch:
            results[index] = result
        if on_batch is not None:
            on_batch(len(batch))
    values: dict[str, object] = {"tokens": np.array([len(i) for i in ids], dtype=np.int32)}  # (N,)
    if "dense" in output.outputs:
        width = bundle.manifest.embedding_size
        pooled = postprocess.stacked(results, "embeddings") if results else np.zeros((0, width))
        finite(pooled, "embeddings")
        values["embeddings"] = postprocess.embeddings(pooled, output.normalize, None)  # (N, D)
    if "sparse" in output.outputs:
        values["sparse"] = [lexical(r["token_weights"], i, spec.sparse_drop_ids) for r, i in zip(results, ids,
                                                                                                  strict=True)]
    if "multi" in output.outputs:
        values["multi"] = [multi_vector_scores.token_vectors(r["multi_vectors"], i, k, spec, document)
                           for r, i, k in zip(results, ids, keep, strict=True)]
        for vectors in values["multi"]:  # type: ignore[attr-defined]
            finite(vectors, "multi_vectors")
    return values


def _sequences(bundle: LoadedBundle, texts: list[str], spec: MultiVectorSpec,
               document: bool) -> tuple[list[TokenSequence], list[np.ndarray], list[np.ndarray]]:
    """What the graph is fed per text (its ids, with ColBERT's attended flags), its (n,) ids and its (n,) kept
    positions (before the spec's skips)."""
    if not fed(spec):  # bge-m3: the text after the model's prefix, every real token kept
        prefix = spec.document_prefix if document else spec.query_prefix
        ids = tokenize(bundle, texts, prefix)
        return [TokenSequence(i) for i in ids], ids, [np.ones_like(i) for i in ids]
    tokenizer = bundle.tokenizer
    feeder = multi_vector_feeds.ColbertFeeder(tokenizer.truncating, spec, tokenizer.max_length,
                                              bundle.manifest.pad_id)
    sequences, ids, keep = [], [], []
    for start in range(0, len(texts), TOKENIZE_ROWS):  # a feed is padded: a bounded batch at a time
        batch = texts[start:start + TOKENIZE_ROWS]
        feed = feeder.documents(batch) if document else feeder.queries(batch)
        for row, n in enumerate(feed.lengths):
            ids.append(feed.input_ids[row, :n])  # (n,)
            keep.append(feed.keep[row, :n])  # (n,)
            sequences.append(TokenSequence(ids[-1], attended=feed.attention_mask[row, :n]))
    return sequences, ids, keep


def _graph(bundle: LoadedBundle, outputs: tuple[str, ...]) -> Graph:
    """The fast graph's session fetching only the outputs `outputs` need (one run gives them all)."""
    return bundle.graphs["fast"].with_outputs([GRAPH_OUTPUTS[name] for name in outputs])


def _spec(bundle: LoadedBundle) -> MultiVectorSpec:
    spec = bundle.manifest.multi_vector
    if spec is None:
        return MultiVectorSpec(size=0)  # --outputs dense alone on a plain bundle: nothing is kept per token
    return spec

