"""Graphs with the same weights write them once: one data file for a bundle's fast and attention fp32 graphs.

The fast and the attention graph are exported from one model, so their weights are the same tensors; written each
into its graph (or its own data file) a bundle holds them twice on disk, and onnxruntime reads them twice into
memory. `share` rewrites a group of graphs so that every initializer of at least MIN_BYTES lives in one data file,
SHARED_DATA, each distinct tensor (by its bytes, element type and dims) once, at an offset aligned to ALIGN bytes
(fp32-opt, derived, reads from it what it holds and keeps its fused tensors in a data file of its own);
each graph names its tensors' places in it (onnx's external data: location, offset, length). Small tensors (shapes,
scalars, the attention graph's layer and head indices) stay inline. The service then maps the file once and hands
the same tensors to both sessions (bundle.weights).

The rewrite moves bytes, it never changes them: a graph reads the tensors it was gated with (export.parity).
One graph at a time is held in memory (its weights loaded, written out, let go).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import onnx
from onnx.external_data_helper import set_external_data

from export import onnxfiles

SHARED_DATA = "weights-fp32.data"
MIN_BYTES = 1024  # onnx's own threshold for external data
ALIGN = 4096  # a page: a tensor's bytes can be mapped where they lie
# (sha256 of the bytes, element type, dims) -> (offset, length) in the shared file
Stored = dict[tuple[bytes, int, tuple[int, ...]], tuple[int, int]]


def share(paths: Sequence[Path], derived: Sequence[Path] = (), data_name: str = SHARED_DATA) -> int:
    """Rewrite the graphs at `paths` (one directory) to read their tensors from `data_name` there, each distinct
    tensor stored once; then the `derived` graphs to read from it the tensors it holds, and their others from a data
    file of their own (onnxfiles.data_name), so the shared file holds exactly the `paths` graphs' weights, whatever
    else a bundle has (a served graph's content, weights included, is the same in every bundle: its fingerprint).
    Their old data files are removed. Returns the bytes of the shared file."""
    directory = Path(paths[0]).parent
    stored: Stored = {}
    with (directory / data_name).open("wb") as data:
        for path in paths:
            _rewrite(Path(path), stored, (data, data_name))
        size = data.tell()
    for path in map(Path, derived):
        _rewrite_derived(path, stored, data_name)
    return size


def _rewrite_derived(path: Path, shared: Stored, data_name: str) -> None:
    own: Stored = {}
    staged = path.with_name(f"{path.name}.staged")
    with staged.open("wb") as data:
        _rewrite(path, own, (data, onnxfiles.data_name(path)), shared, data_name)
    if own:
        staged.rename(path.parent / onnxfiles.data_name(path))
    else:
        staged.unlink()


def _rewrite(path: Path, stored: Stored, target: tuple[BinaryIO, str], shared: Stored | None = None,
             shared_name: str = "") -> None:
    """One graph: its weights loaded, each read from `shared` (the file `shared_name`) when there, else written to
    `target` (a data file and its name) where not there yet; the graph saved pointing at them."""
    model = onnx.load(str(path))  # with its external data, if any
    data, data_name = target
    for tensor in model.graph.initializer:
        if len(tensor.raw_data) >= MIN_BYTES:
            key = _key(tensor)
            if shared is not None and key in shared:
                set_external_data(tensor, shared_name, *shared[key])
            else:
                set_external_data(tensor, data_name, *_store(tensor, key, data, stored))
            tensor.data_location = onnx.TensorProto.EXTERNAL
            tensor.ClearField("raw_data")
    onnxfiles.clear(path)  # the graph and its own data file
    onnx.save(model, str(path))


def _key(tensor: onnx.TensorProto) -> tuple[bytes, int, tuple[int, ...]]:
    return hashlib.sha256(tensor.raw_data).digest(), tensor.data_type, tuple(tensor.dims)


def _store(tensor: onnx.TensorProto, key: tuple[bytes, int, tuple[int, ...]], data: BinaryIO,
           stored: Stored) -> tuple[int, int]:
    raw = tensor.raw_data
    if key not in stored:
        offset = -data.tell() % ALIGN + data.tell()
        data.write(b"\0" * (offset - data.tell()))
        data.write(raw)
        stored[key] = (offset, len(raw))
    return stored[key]
