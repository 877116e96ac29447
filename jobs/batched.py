"""Token ids to graph outputs, batch by batch, with the inference core's pieces: texts are tokenised by
`TextTokenizer.encode_ids` (truncated from the right, as `encode(truncate=True)` cuts), batched by
`BatchQueue.next_batch` (the oldest row, then the rows nearest in length, under the token budget and the size
cap) with at most `Batching.window` rows waiting, a queue of `BatchOptions.max_queue` kept full, and run by the
loaded bundle's `Graph`. The plain job (jobs.embedding), --chunking's windows (jobs.windows), --outputs
(jobs.multivector) and images (jobs.images: `ImageSequence`s, queued as their tokens) all run through `run_batched`.

Shape letters: T tokens of one row.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

import numpy as np

from inference.errors import NonFiniteOutput
from inference.limits import check_finite
from inference.options import BatchOptions
from inference.runtime.graphs import FAST, BatchKind, Graph, Input
from inference.runtime.loading import LoadedBundle
from inference.scheduling.batchqueue import BatchQueue
from jobs.options import JobError

TOKENIZE_ROWS = 1024  # texts tokenised at a time: only their ids are kept


@dataclass(frozen=True)
class Batching:
    max_tokens: int  # `BatchOptions.max_batch_tokens`
    max_size: int  # `BatchOptions.max_batch_size`
    window: int  # `BatchOptions.max_queue`: rows waiting to be batched at once

    @classmethod
    def of(cls, options: BatchOptions) -> Batching:
        return cls(options.max_batch_tokens, options.max_batch_size, options.max_queue)


@dataclass(eq=False)
class _Item:
    index: int
    sequence: Input  # a text's ids, or an image's pixels (jobs.images)
    kind: BatchKind = FAST

    @property
    def length(self) -> int:
        return len(self.sequence)


def tokenize(bundle: LoadedBundle, texts: list[str], prompt: str = "") -> list[np.ndarray]:
    """Token ids per text (after `prompt`), by `TextTokenizer.encode_ids`: truncated to the model's max length
    from the right. A bounded number of texts at a time, so only ids are held."""
    sequences: list[np.ndarray] = []
    for start in range(0, len(texts), TOKENIZE_ROWS):
        sequences.extend(bundle.tokenizer.encode_ids(texts[start:start + TOKENIZE_ROWS], prompt=prompt))
    return sequences


def run_batched(
    bundle: LoadedBundle, sequences: Iterable[Input], batching: Batching, graph: Graph | None = None,
    adapter: int = 0,
) -> Iterator[list[tuple[int, dict[str, np.ndarray]]]]:
    """Batch by batch, the graph outputs of each sequence (run with adapter index `adapter`) with its index in
    `sequences`. Batches are chosen by `inference.scheduling.batchqueue.BatchQueue.next_batch` from at most
    `batching.window` waiting sequences; `sequences` is drawn lazily, only as the queue has room."""
    pending = (_Item(index, sequence) for index, sequence in enumerate(sequences))
    queue: BatchQueue[_Item] = BatchQueue()
    queue.push(list(islice(pending, batching.window)))
    while len(queue):
        batch = queue.next_batch(batching.max_size, batching.max_tokens)
        rows = [item.sequence for item in batch]
        adapters = [adapter] * len(rows)
        outputs = graph.run(rows, adapters) if graph is not None else bundle.run_batch(FAST, rows, adapters)
        if len(outputs) != len(batch):
            raise JobError(f"the graph returned {len(outputs)} results for {len(batch)} inputs")
        yield [(item.index, result) for item, result in zip(batch, outputs, strict=True)]
        queue.push(list(islice(pending, batching.window - len(queue))))


def finite(values: np.ndarray, name: str) -> None:
    """JobError when the model produced NaN or Inf in `values` (`inference.limits.check_finite`, the job's
    error)."""
    try:
        check_finite(values, name, 0)
    except NonFiniteOutput:
        raise JobError(f"the model produced NaN or Inf in {name}") from None
