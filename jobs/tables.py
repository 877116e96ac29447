"""The output rows as Arrow: the schema a job's parts share, and one table per part from the embedded values.

Every column type lives here, the multi-vector ones (--outputs multi) too, so the writers need no job module:
jobs.embedding, jobs.windows and jobs.multivector give values; this module gives them their columns.

Shape letters: N rows, M windows (or token vectors' width), C labels, k kept tokens of one row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from inference.results import SparseVector
from jobs.options import JobOutput

WINDOW_COLUMNS = ("window", "start", "stop", "tokens")  # with --chunking windows, after the id
SPARSE_TYPE = pa.list_(pa.struct([("index", pa.int32()), ("value", pa.float32())]))  # --sparse: nonzero entries
MULTI_DTYPES = {"float32": pa.float32(), "float16": pa.float16()}  # --multi-dtype: the token vectors' type
FINGERPRINT_KEY = b"attnserve.model_fingerprint"  # Parquet schema metadata: LoadedBundle.fingerprint


def schema(id_type: pa.DataType, hidden: int, labels: list[str], output: JobOutput, fingerprint: str,
           multi_width: int = 0) -> pa.Schema:
    """id, embedding (with --outputs: when dense is asked for), then tokens, label, scores, sparse and multi (each
    row's `multi_width`-wide token vectors, jobs.multivector) as asked. With --chunking windows, one row per window:
    id, window, start, stop, tokens (its content tokens: always), embedding, then label and scores. The
    schema's metadata holds the model's fingerprint (FINGERPRINT_KEY: `LoadedBundle.fingerprint`, the value of
    x-model-fingerprint): an index built from parts of several jobs can tell whether one model build made every
    vector."""
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
        row_type = target.field("multi").type.value_type  # fixed-size lists of M values
        dtype = "float16" if row_type.value_type == pa.float16() else "float32"
        columns["multi"] = multi_column(values["multi"], row_type.list_size, dtype)  # type: ignore[arg-type]
    return pa.table(columns, schema=target)


def id_type(has_id_column: bool) -> pa.DataType:
    """Ids from a column are strings (whatever the column held); row numbers are int64."""
    return pa.string() if has_id_column else pa.int64()


def multi_type(width: int, dtype: str) -> pa.DataType:
    """A row's token vectors: a list of fixed-size lists of `width` values."""
    return pa.list_(pa.list_(MULTI_DTYPES[dtype], width))


def multi_column(vectors: list[np.ndarray], width: int, dtype: str) -> pa.Array:
    """Per row its (k, M) vectors, from one flat buffer and offsets (float16 rounded from float32 when asked)."""
    offsets = np.cumsum([0, *(len(v) for v in vectors)]).astype(np.int32)  # (N + 1,)
    numpy_type = np.float16 if dtype == "float16" else np.float32
    flat = np.concatenate([v.reshape(-1) for v in vectors]).astype(numpy_type) if vectors else np.zeros(0, numpy_type)
    rows = pa.FixedSizeListArray.from_arrays(pa.array(flat, type=MULTI_DTYPES[dtype]), width)
    return pa.ListArray.from_arrays(pa.array(offsets), rows, type=multi_type(width, dtype))


def _sparse(vectors: list[SparseVector]) -> pa.Array:
    """Per row its nonzero (index, value) entries, from flat buffers and offsets."""
    offsets = np.cumsum([0, *(len(v.indices) for v in vectors)]).astype(np.int32)  # (N + 1,)
    flat = [np.concatenate([getattr(v, name) for v in vectors]) if vectors else np.zeros(0) for name in
            ("indices", "values")]
    entries = pa.StructArray.from_arrays([pa.array(flat[0], pa.int32()), pa.array(flat[1], pa.float32())],
                                         fields=list(SPARSE_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets), entries, type=SPARSE_TYPE)


def _fixed(values: np.ndarray) -> pa.Array:
    """(N, K) float32 -> a fixed-size list column of K float32 values per row, from one flat buffer."""
    n, k = values.shape
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(n * k), type=pa.float32()), k)
