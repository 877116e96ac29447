"""From a chunk of rows to an Arrow table, with the inference core's pieces; the local job and Ray both call this.

Bad rows (no text, a text that is not a string or is empty, no id) are set aside with their reason. The
good ones are tokenised by the core's `TextTokenizer` (truncation as the server does), batched by the
core's `BatchQueue.next_batch` (the oldest row, then the rows nearest in length, under the token budget
and the size cap) with at most `window` rows waiting, as in the server's queue under full load, run by
the loaded bundle's fast `Graph`, and post-processed by `inference.postprocess` (normalisation, scores).
Texts get the model's prompt as /embed gives it (--instruction, else --prompt-name, else the prompt named like
--task, else the model's default), and with --task every graph run carries that LoRA adapter's index, as the
server's runs for a request's `task`.
Same bundle, variant and batches as the server: the same vectors. With --chunking, jobs.windows cuts the
texts into windows instead and runs them through the same `run_batched`.

Shape letters: N rows, D hidden, C labels, T tokens of one row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np
import pyarrow as pa

from bundle.manifest import Manifest
from inference import postprocess, rules
from inference.chunking import Mode
from inference.errors import NoInstruction, NonFiniteOutput, UnknownAdapter, UnknownPrompt
from inference.limits import check_finite
from inference.options import BatchOptions
from inference.prompts import prompt_text
from inference.results import SparseVector
from inference.runtime.graphs import Graph
from inference.runtime.loading import LoadedBundle
from inference.scheduling.batchqueue import BatchQueue
from inference.tasks.sparse import nonzero
from jobs.inputs import Bad, Chunk

TOKENIZE_ROWS = 1024  # texts tokenised at a time: only their ids are kept
WINDOW_COLUMNS = ("window", "start", "stop", "tokens")  # with --chunking windows, after the id
SPARSE_TYPE = pa.list_(pa.struct([("index", pa.int32()), ("value", pa.float32())]))  # --sparse: nonzero entries
FINGERPRINT_KEY = b"attnserve.model_fingerprint"  # Parquet schema metadata: LoadedBundle.fingerprint


OnBatch = Callable[[int], None]  # told how many rows each batch finished (progress)
TooLong = Callable[[list[str]], list[str | None]]  # per text, why it is set aside (None: it is not)


class JobError(Exception):
    """The job cannot go on (a model fault, an output it cannot write); the message says why."""


@dataclass(frozen=True)
class Chunking:
    """--chunking: long texts cut into inference.chunking's windows instead of truncated."""

    mode: Mode  # mean: one pooled row per document; windows: one row per window
    overlap: int | None  # tokens shared by neighbouring windows; None: the server's default (jobs.windows.resolve)
    max_windows: int  # a document that makes more windows is a bad row

    @property
    def shared(self) -> int:
        """The overlap, once jobs.windows.resolve has given it (the job's windows are cut only after)."""
        if self.overlap is None:
            raise JobError("the chunk overlap was not resolved against the bundle (jobs.windows.resolve)")
        return self.overlap


@dataclass(frozen=True)
class JobOutput:
    """What the output rows are (one per document, or one per window) and hold besides id and embedding."""

    normalize: bool = True
    classify: bool = False
    token_count: bool = False
    chunking: Chunking | None = None  # None: truncate, as the server's default
    sparse: bool = False  # a masked-LM bundle's SPLADE vector too: a column of (index, value) lists
    prompt_name: str | None = None  # the model's prompt put before every text; None: its default, as the server's
    instruction: str | None = None  # an instruction-following embedder's task, as /embed's `instruction`
    task: str | None = None  # the model's LoRA adapter every row runs with, as a request's `task`; None: the base
    outputs: tuple[str, ...] | None = None  # --outputs of a multi-vector bundle (jobs.multivector); None: dense as ever
    multi_dtype: str = "float32"  # the token vectors' type in Parquet: float32 or float16
    input_type: str = "document"  # a multi-vector model's texts read as queries or documents


# Fields a job's record (_job.json) leaves out at their defaults, so a job begun before they existed still resumes
LATER_FIELDS = ("outputs", "multi_dtype", "input_type")


def recorded(output: JobOutput) -> dict[str, Any]:
    """The output's fields as _job.json records them: every field, less those of LATER_FIELDS at their defaults."""
    defaults = JobOutput()
    return {name: value for name, value in dataclasses.asdict(output).items()
            if name not in LATER_FIELDS or value != getattr(defaults, name)}


def adapter_of(manifest: Manifest, output: JobOutput) -> int:
    """The adapter index every graph run feeds for --task (`inference.rules.adapter_index`, a request's `task`
    rule); JobError for a task the model does not have, or any task when it has no adapters."""
    try:
        return rules.adapter_index(manifest, output.task, manifest.name)
    except UnknownAdapter as error:
        raise JobError("--task: " + error.message.replace("leave `task` out", "leave --task out")) from None


def prompt_of(manifest: Manifest, output: JobOutput) -> str:
    """The prefix of every text (`inference.prompts`: --instruction, else --prompt-name, else the prompt named like
    --task, else the model's default prompt, as /embed chooses); JobError for a name the model does not have, an
    instruction it does not take or a task it does not have."""
    adapter_of(manifest, output)
    try:
        return prompt_text(manifest, output.prompt_name, instruction=output.instruction, adapter=output.task)
    except UnknownPrompt as error:
        raise JobError(f"--prompt-name: {error.message}") from None
    except NoInstruction as error:
        raise JobError(f"--instruction: {error.message}") from None


@dataclass(frozen=True)
class Batching:
    max_tokens: int  # the server's max_batch_tokens
    max_size: int  # the server's max_batch_size
    window: int  # the server's max_queue: rows waiting to be batched at once

    @classmethod
    def of(cls, options: BatchOptions) -> Batching:
        return cls(options.max_batch_tokens, options.max_batch_size, options.max_queue)


@dataclass(eq=False)
class _Item:
    index: int
    ids: np.ndarray  # (T,) int64
    kind: str = "fast"

    @property
    def length(self) -> int:
        return int(self.ids.shape[0])


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
    for batch in run_batched(bundle, sequences, batching, _graph(bundle, output), adapter):
        for index, result in batch:
            results[index] = result
        if on_batch is not None:
            on_batch(len(batch))
    vectors = np.stack([r["embeddings"] for r in results]) if results else np.zeros((0, bundle.manifest.embedding_size))
    finite(vectors, "embeddings")
    values = {"embeddings": postprocess.embeddings(vectors, output.normalize, None),  # (N, D)
              "tokens": np.array([s.shape[0] for s in sequences], dtype=np.int32)}  # (N,)
    if output.classify:
        logits = np.stack([r["logits"] for r in results]) if results else np.zeros((0, len(bundle.manifest.labels)))
        values["scores"] = postprocess.scores(logits).astype(np.float32)  # (N, C)
    if output.sparse:
        values["sparse"] = [nonzero(r["sparse"]) for r in results]  # type: ignore[assignment]
    return values


def _graph(bundle: LoadedBundle, output: JobOutput) -> Graph:
    """The fast graph, fetching the sparse vector too when asked (one run for both)."""
    fast = bundle.graphs["fast"]
    return fast.with_outputs([*fast.outputs, "sparse"]) if output.sparse else fast


def tokenize(bundle: LoadedBundle, texts: list[str], prompt: str = "") -> list[np.ndarray]:
    """Token ids per text (after `prompt`), truncated to the model's max length from the right, as the service's
    default."""
    sequences: list[np.ndarray] = []
    for start in range(0, len(texts), TOKENIZE_ROWS):
        sequences.extend(bundle.tokenizer.encode_ids(texts[start:start + TOKENIZE_ROWS], prompt=prompt))
    return sequences


def run_batched(
    bundle: LoadedBundle, sequences: Iterable[np.ndarray], batching: Batching, graph: Graph | None = None,
    adapter: int = 0,
) -> Iterator[list[tuple[int, dict[str, np.ndarray]]]]:
    """Batch by batch, the graph outputs of each sequence (run with adapter index `adapter`) with its index in
    `sequences`. Batches are chosen by the service's BatchQueue from at most `batching.window` waiting sequences;
    `sequences` is drawn lazily, only as the queue has room."""
    pending = (_Item(index, ids) for index, ids in enumerate(sequences))
    queue: BatchQueue[_Item] = BatchQueue()
    queue.push(list(islice(pending, batching.window)))
    while len(queue):
        batch = queue.next_batch(batching.max_size, batching.max_tokens)
        ids = [item.ids for item in batch]
        adapters = [adapter] * len(ids)
        outputs = graph.run(ids, adapters) if graph is not None else bundle.run_batch("fast", ids, adapters)
        if len(outputs) != len(batch):
            raise JobError(f"the graph returned {len(outputs)} results for {len(batch)} inputs")
        yield [(item.index, result) for item, result in zip(batch, outputs, strict=True)]
        queue.push(list(islice(pending, batching.window - len(queue))))


def finite(values: np.ndarray, name: str) -> None:
    """JobError when the model produced NaN or Inf in `values` (the core's check, the job's error)."""
    try:
        check_finite(values, name, 0)
    except NonFiniteOutput:
        raise JobError(f"the model produced NaN or Inf in {name}") from None


def schema(id_type: pa.DataType, hidden: int, labels: list[str], output: JobOutput, fingerprint: str,
           multi_width: int = 0) -> pa.Schema:
    """id, embedding (with --outputs: when dense is asked for), then tokens, label, scores, sparse and multi (each
    row's `multi_width`-wide token vectors, jobs.multivector) as asked. With --chunking windows, one row per window:
    id, window, start, stop, tokens (its content tokens: always), embedding, then label and scores. The
    schema's metadata holds the model's fingerprint (FINGERPRINT_KEY), as the server's x-model-fingerprint
    says it: an index built from parts of several jobs can tell whether one model build made every vector."""
    windows = output.chunking is not None and output.chunking.mode == "windows"
    fields = [pa.field("id", id_type)] + [pa.field(name, pa.int32()) for name in WINDOW_COLUMNS if windows]
    if output.outputs is None or "dense" in output.outputs:
        fields.append(pa.field("embedding", pa.list_(pa.float32(), hidden)))
    if output.token_count and not windows:
        fields.append(pa.field("tokens", pa.int32()))
    if output.classify:
        fields += [pa.field("label", pa.string()), pa.field("scores", pa.list_(pa.float32(), len(labels)))]
    if output.sparse or "sparse" in (output.outputs or ()):
        fields.append(pa.field("sparse", SPARSE_TYPE))
    if "multi" in (output.outputs or ()):
        from jobs.multivector import multi_type

        fields.append(pa.field("multi", multi_type(multi_width, output.multi_dtype)))
    return pa.schema(fields, metadata={FINGERPRINT_KEY: fingerprint.encode()})


def table(ids: list[Any], values: dict[str, np.ndarray], labels: list[str], target: pa.Schema) -> pa.Table:
    """The output rows: id, then the other columns of `target` from `values`. With --chunking windows,
    values["doc"] (M,) is each row's document: its index in `ids`."""
    if "doc" in values:
        ids = [ids[doc] for doc in values["doc"].tolist()]
    columns: dict[str, pa.Array] = {"id": pa.array(ids, type=target.field("id").type)}
    if "embedding" in target.names:
        columns["embedding"] = _fixed(values["embeddings"])
    for name in WINDOW_COLUMNS:  # tokens among them: written in every mode that asks for it
        if name in target.names:
            columns[name] = pa.array(values[name], type=pa.int32())
    if "scores" in target.names:
        scores = values["scores"]  # (N, C)
        columns["label"] = pa.array([labels[i] for i in np.argmax(scores, axis=-1)] if len(scores) else [],
                                    type=pa.string())
        columns["scores"] = _fixed(scores)
    if "sparse" in target.names:
        columns["sparse"] = _sparse(values["sparse"])  # type: ignore[arg-type]
    if "multi" in target.names:
        from jobs.multivector import multi_column

        row_type = target.field("multi").type.value_type  # fixed-size lists of M values
        dtype = "float16" if row_type.value_type == pa.float16() else "float32"
        columns["multi"] = multi_column(values["multi"], row_type.list_size, dtype)  # type: ignore[arg-type]
    return pa.table(columns, schema=target)


def _sparse(vectors: list[SparseVector]) -> pa.Array:
    """Per row its nonzero (index, value) entries, from flat buffers and offsets."""
    offsets = np.cumsum([0, *(len(v.indices) for v in vectors)]).astype(np.int32)  # (N + 1,)
    flat = [np.concatenate([getattr(v, name) for v in vectors]) if vectors else np.zeros(0) for name in
            ("indices", "values")]
    entries = pa.StructArray.from_arrays([pa.array(flat[0], pa.int32()), pa.array(flat[1], pa.float32())],
                                         fields=list(SPARSE_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets), entries, type=SPARSE_TYPE)


def id_type(has_id_column: bool) -> pa.DataType:
    """Ids from a column are strings (whatever the column held); row numbers are int64."""
    return pa.string() if has_id_column else pa.int64()


def _fixed(values: np.ndarray) -> pa.Array:
    """(N, K) float32 -> a fixed-size list column of K float32 values per row, from one flat buffer."""
    n, k = values.shape
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(n * k), type=pa.float32()), k)
