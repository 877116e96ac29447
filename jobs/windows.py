"""--chunking mean|windows: long documents cut by `inference.chunking.cut`, each window run as its own item.

The cutting, the checks and the pooling are `inference.chunking`'s, so the job's windows, spans and pooled vectors are
those of `/embed` with the same `chunking` and `chunk_overlap`: a document's content tokens are cut into
windows of W = max_length less the special tokens, sharing `overlap` tokens, each wrapped in the special
tokens. Every window is one item of `jobs.batched.run_batched`, where `BatchQueue.next_batch` batches
windows by length under the token budget as it batches rows, so one document's windows may run in
different batches. Documents are cut a few at a time, as the queue has room; a document's window
outputs are kept until its last window has run, then pooled at once (mean: the content-token-weighted
mean before normalisation, logits before softmax) or kept as one row per window (windows). A part is
written once all its documents are done, so memory holds one part's answers and the waiting windows.

A document that would make more windows than the cap (--max-windows-per-input: `RequestLimits.max_windows_per_input`) is
a bad row: `WindowCap` counts its windows (`chunking.too_many_windows`) before any is built and gives the
reason, and `embedding.split` sets it aside with the other bad rows.

Shape letters: N documents, M windows of all of them, K windows of one, D hidden, C labels.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
from tokenizers import Encoding

from bundle.manifest import Manifest
from inference import chunking, postprocess, rules
from inference.chunking import Window
from inference.errors import OutOfRange
from inference.runtime.graphs import TokenSequence
from inference.runtime.loading import LoadedBundle
from inference.runtime.tokenize import TextTokenizer
from jobs import embedding, multivector
from jobs.batched import Batching, finite, run_batched
from jobs.options import Chunking, JobError, JobOutput, OnBatch, adapter_of, prompt_of

CUT_ROWS = 64  # documents tokenised and cut at a time: their windows wait to be queued
NO_IDS = np.zeros(0, dtype=np.int64)  # a window's ids once queued: its span and weight are what is kept
Outputs = dict[str, np.ndarray]


def resolve(output: JobOutput, tokenizer: TextTokenizer, manifest: Manifest) -> JobOutput:
    """`output` with its chunking's overlap given: --chunk-overlap, or the model's default
    (`inference.rules.text_overlap` with none given, as for a request that names none)."""
    if output.chunking is None or output.chunking.overlap is not None:
        return output
    return replace(output, chunking=replace(output.chunking, overlap=rules.text_overlap(tokenizer, manifest, None)))


def check(tokenizer: TextTokenizer, options: Chunking, prompt: str = "") -> None:
    """--chunk-overlap must leave the windows room to advance beside the prompt: 0 <= N < W - P
    (`inference.chunking.check_overlap` with this prompt's tokens)."""
    prompt_tokens = len(tokenizer.content([prompt])[0].ids) if prompt else 0
    try:
        chunking.check_overlap(tokenizer, options.shared, prompt=prompt_tokens)
    except OutOfRange as error:
        raise JobError(error.message.replace("chunk_overlap", "--chunk-overlap", 1)) from None


@dataclass(frozen=True)
class WindowCap:
    """Why each text is set aside for making too many windows (None: it is not). A `jobs.options.TooLong`. With
    a prompt, the text's tokens are counted against windows less the prompt's tokens, as `chunking.cut` cuts."""

    tokenizer: TextTokenizer
    options: Chunking
    prompt: str = ""

    def __call__(self, texts: list[str]) -> list[str | None]:
        encodings = [e for start in range(0, len(texts), CUT_ROWS)
                     for e in self.tokenizer.content(texts[start:start + CUT_ROWS], self.prompt)]
        return [self._reason(e) for e in encodings]

    def _reason(self, encoding: Encoding) -> str | None:
        prompt = self.tokenizer.split_prompt(encoding, len(self.prompt)).length if self.prompt else 0
        size = chunking.window_size(self.tokenizer) - prompt
        reason = chunking.too_many_windows(len(encoding.ids), size, self.options.shared, self.options.max_windows)
        return None if reason is None else f"{reason} (--max-windows-per-input)"


def too_long(tokenizer: TextTokenizer, output: JobOutput, prompt: str = "") -> WindowCap | None:
    return WindowCap(tokenizer, output.chunking, prompt) if output.chunking is not None else None


def embed(
    bundle: LoadedBundle, texts: list[str], output: JobOutput, batching: Batching, on_rows: OnBatch | None = None,
) -> dict[str, np.ndarray]:
    """`embedding.embed` without chunking. With it, per document (mean): embeddings (N, D), tokens (N,) run (every
    window's, special tokens included), scores (N, C); per window (windows): doc, window, start, stop,
    tokens (M,) content tokens, embeddings (M, D), scores (M, C). `on_rows` is told the documents done."""
    if output.outputs is not None:  # a multi-vector bundle's outputs, one run per batch
        return multivector.embed(bundle, texts, output, batching, on_rows)  # type: ignore[return-value]
    if output.chunking is None:
        return embedding.embed(bundle, texts, output, batching, on_rows)
    documents = _Documents(output.chunking)
    sequences = documents.cut(bundle.tokenizer, texts, prompt_of(bundle.manifest, output))
    adapter = adapter_of(bundle.manifest, output)  # every window runs with the --task adapter
    for batch in run_batched(bundle, sequences, batching, adapter=adapter):
        done = documents.record(batch)
        if on_rows is not None:
            on_rows(done)
    classes = len(bundle.manifest.labels) if output.classify else None
    return documents.values(output, bundle.manifest.embedding_size, classes)


class _Documents:
    """The documents of one call: their windows (spans and weights), and their outputs as they come."""

    def __init__(self, options: Chunking) -> None:
        self.options = options
        self.windows: list[list[Window]] = []  # per document, without their ids
        self.run: list[int] = []  # per document, tokens run (special tokens included)
        self.outputs: list[list[Outputs]] = []  # per document: per window, then pooled (mean) into one
        self.left: list[int] = []  # per document, windows not yet run
        self.where: list[tuple[int, int]] = []  # per window item: (document, window)

    def cut(self, tokenizer: TextTokenizer, texts: list[str], prompt: str) -> Iterator[TokenSequence]:
        """Each window's sequence (after `prompt`), document after document, recording the windows as they are
        cut."""
        for start in range(0, len(texts), CUT_ROWS):
            for windows in chunking.cut(tokenizer, texts[start:start + CUT_ROWS], self.options.shared,
                                        self.options.max_windows, prompt):
                document = len(self.windows)
                self.windows.append([replace(w, ids=NO_IDS) for w in windows])
                self.run.append(sum(w.length for w in windows))
                self.outputs.append([{} for _ in windows])
                self.left.append(len(windows))
                self.where += [(document, k) for k in range(len(windows))]
                yield from (w.sequence for w in windows)

    def record(self, batch: list[tuple[int, Outputs]]) -> int:
        """Keep a batch's outputs; pool each document whose last window this was (mean). Documents done."""
        done = 0
        for index, result in batch:
            document, k = self.where[index]
            for name, value in result.items():
                finite(value, name)
            self.outputs[document][k] = result
            self.left[document] -= 1
            if self.left[document] == 0:
                done += 1
                if self.options.mode == "mean":
                    self.outputs[document] = [self._pooled(document)]
        return done

    def _pooled(self, document: int) -> Outputs:
        outputs, windows = self.outputs[document], self.windows[document]
        return {name: chunking.pool(np.stack([o[name] for o in outputs]), windows)  # (K, D) -> (D,)
                for name in outputs[0]}

    def values(self, output: JobOutput, hidden: int, classes: int | None) -> dict[str, np.ndarray]:
        """What jobs.tables.table takes: per document (mean) or per window (windows), in input order."""
        flat = [o for outputs in self.outputs for o in outputs]  # N pooled, or M windows
        values = {"embeddings": postprocess.embeddings(_stack(flat, "embeddings", hidden), output.normalize, None)}
        if classes is not None:
            values["scores"] = postprocess.scores(_stack(flat, "logits", classes)).astype(np.float32)
        if self.options.mode == "mean":
            values["tokens"] = np.array(self.run, dtype=np.int32)  # (N,)
            return values
        return values | self._spans()

    def _spans(self) -> dict[str, np.ndarray]:
        """doc, window, start, stop, tokens: (M,) each, in document and window order."""
        flat = [(d, k, w) for d, windows in enumerate(self.windows) for k, w in enumerate(windows)]
        return {"doc": np.array([d for d, _, _ in flat], dtype=np.int64),
                "window": np.array([k for _, k, _ in flat], dtype=np.int32),
                "start": np.array([w.start for _, _, w in flat], dtype=np.int32),
                "stop": np.array([w.stop for _, _, w in flat], dtype=np.int32),
                "tokens": np.array([w.tokens for _, _, w in flat], dtype=np.int32)}


def _stack(outputs: Sequence[Outputs], name: str, width: int) -> np.ndarray:
    return postprocess.stacked(outputs, name) if outputs else np.zeros((0, width), dtype=np.float32)
