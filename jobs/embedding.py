"""From a chunk of rows to the values of its output rows, with the inference core's pieces; the local job and
Ray both call this.

Bad rows (no text, a text that is not a string or is empty, no id) are set aside with their reason. The good
ones get the model's prompt (`jobs.options.prompt_of`: `inference.prompts.prompt_text`), are tokenised, batched
and run by `jobs.batched.run_batched` (with --task, every run carries `inference.rules.adapter_index`'s adapter),
and post-processed by `inference.postprocess.embeddings` and `scores` (and `inference.tasks.sparse.nonzero`).
Same bundle, variant and batches as a served model: the same vectors. With --chunking, jobs.windows cuts the
texts into windows instead and runs them through the same `run_batched`; jobs.tables writes the values.

Shape letters: N rows, D hidden, C labels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bundle.manifest import Manifest
from inference import postprocess
from inference.runtime.graphs import Graph, Outputs, TokenSequence
from inference.runtime.loading import LoadedBundle
from inference.tasks.sparse import nonzero
from jobs.batched import Batching, finite, run_batched, tokenize
from jobs.inputs import Bad, Chunk
from jobs.options import Chunking, JobError, JobOutput, OnBatch, TooLong, adapter_of, prompt_of
from jobs.tables import FINGERPRINT_KEY

# Importable from here as they were before jobs/ was split (tests/jobs/test_ray.py, bench/job.py)
__all__ = ["FINGERPRINT_KEY", "Batching", "Chunking", "JobError", "JobOutput", "embed", "reject_reason", "split"]


def reject_reason(row_id: Any, text: Any) -> str | None:
    if isinstance(text, Bad):
        return text.reason
    if text is None:
        return "missing text"
    if not isinstance(text, str):
        return f"text is not a string ({type(text).__name__})"
    if not text.strip():
        return "empty text"
    if row_id is None:
        return "missing id"
    return None


def split(chunk: Chunk, too_long: TooLong | None = None) -> tuple[list[int], list[dict[str, Any]]]:
    """Indices of the good rows, and a {row, id, reason} record for each bad one, in row order. `too_long`
    (with --chunking: too many windows) is asked about the rows that pass the other checks."""
    reasons = [reject_reason(row_id, text) for row_id, text in zip(chunk.ids, chunk.texts, strict=True)]
    if too_long is not None:
        kept = [offset for offset, reason in enumerate(reasons) if reason is None]
        for offset, reason in zip(kept, too_long([chunk.texts[i] for i in kept]), strict=True):
            reasons[offset] = reason
    good = [offset for offset, reason in enumerate(reasons) if reason is None]
    rejects = [{"row": chunk.start + offset, "id": chunk.ids[offset], "reason": reason}
               for offset, reason in enumerate(reasons) if reason is not None]
    return good, rejects


def embed(
    bundle: LoadedBundle, texts: list[str], output: JobOutput, batching: Batching, on_batch: OnBatch | None = None,
) -> dict[str, np.ndarray]:
    """embeddings (N, D) float32, tokens (N,) int32 (a prompt's included), and scores (N, C) float32 when
    classifying."""
    sequences = tokenize(bundle, texts, prompt_of(bundle.manifest, output))
    results: list[dict[str, np.ndarray]] = [{}] * len(sequences)
    adapter = adapter_of(bundle.manifest, output)
    for batch in run_batched(bundle, map(TokenSequence, sequences), batching, _graph(bundle, output), adapter):
        for index, result in batch:
            results[index] = result
        if on_batch is not None:
            on_batch(len(batch))
    return values(bundle.manifest, results, np.array([s.shape[0] for s in sequences], dtype=np.int32), output)


def values(manifest: Manifest, results: list[Outputs], tokens: np.ndarray, output: JobOutput) -> dict[str, np.ndarray]:
    """The rows' values from their graph outputs, texts' and images' alike: embeddings (N, D), tokens (N,), and
    scores (N, C) and sparse vectors when asked."""
    vectors = postprocess.stacked(results, "embeddings") if results else np.zeros((0, manifest.embedding_size))
    finite(vectors, "embeddings")
    out = {"embeddings": postprocess.embeddings(vectors, output.normalize, None), "tokens": tokens}  # (N, D), (N,)
    if output.classify:
        logits = postprocess.stacked(results, "logits") if results else np.zeros((0, len(manifest.labels)))
        out["scores"] = postprocess.scores(logits).astype(np.float32)  # (N, C)
    if output.sparse:
        out["sparse"] = [nonzero(r["sparse"]) for r in results]  # type: ignore[assignment]
    return out


def _graph(bundle: LoadedBundle, output: JobOutput) -> Graph:
    """The fast graph, fetching the sparse vector too when asked (one run for both)."""
    fast = bundle.graphs["fast"]
    return fast.with_outputs([*fast.outputs, "sparse"]) if output.sparse else fast
