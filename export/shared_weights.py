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
One tensor at a time is held in memory, and a weight is read once per place it has in a data file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import onnx

from bundle.external_data import external_locations
from export import onnxfiles

SHARED_DATA = "weights-fp32.data"
MIN_BYTES = 1024  # onnx's own threshold for external data
ALIGN = 4096  # a page: a tensor's bytes can be mapped where they lie
Key = tuple[bytes, int, tuple[int, ...]]  # a tensor's sha256, element type and dims


class Stored(dict[Key, tuple[int, int]]):
    """Key -> (offset, length) in the data file written; `places`: (location, offset, length) in a data file read ->
    the key of the bytes there."""

    def __init__(self) -> None:
        super().__init__()
        self.places: dict[tuple[str, int, int], Key] = {}


def share(paths: Sequence[Path], derived: Sequence[Path] = (), data_name: str = SHARED_DATA) -> int:
    """Rewrite the graphs at `paths` (one directory) to read their tensors from `data_name` there, each distinct
    tensor stored once; then the `derived` graphs to read from it the tensors it holds, and their others from a data
    file of their own (onnxfiles.data_name), so the shared file holds exactly the `paths` graphs' weights, whatever
    else a bundle has (a served graph's content, weights included, is the same in every bundle: its fingerprint).
    Their old data files are removed. Returns the bytes of the shared file."""
    directory = Path(paths[0]).parent
    stored = Stored()
    old: set[str] = set()
    with (directory / data_name).open("wb") as data:
        for path in paths:
            old |= _rewrite(Path(path), stored, (data, data_name))
        size = data.tell()
    for path in map(Path, derived):
        old |= _rewrite_derived(path, stored, data_name)
    for name in old - {data_name, *(onnxfiles.data_name(path) for path in derived)}:
        (directory / name).unlink(missing_ok=True)  # once no graph reads it
    return size


def _rewrite_derived(path: Path, shared: Stored, data_name: str) -> set[str]:
    own = Stored()
    staged = path.with_name(f"{path.name}.staged")
    with staged.open("wb") as data:
        old = _rewrite(path, own, (data, onnxfiles.data_name(path)), shared, data_name)
    if own:
        staged.rename(path.parent / onnxfiles.data_name(path))
    else:
        staged.unlink()
        (path.parent / onnxfiles.data_name(path)).unlink(missing_ok=True)
    return old


def _rewrite(path: Path, stored: Stored, target: tuple[BinaryIO, str], shared: Stored | None = None,
             shared_name: str = "") -> set[str]:
    """One graph: each weight read from `shared` (the file `shared_name`) when there, else written to `target` (a data
    file and its name) where not there yet; the graph saved pointing at them. A weight already in an external data
    file is read from it only the first time its place there is met (a fast graph derived from the attention graph
    names the attention graph's places: the second graph costs no read of its weights)."""
    model = onnx.load(str(path), load_external_data=False)
    old = external_locations(path)  # removed by share() once every graph is rewritten
    data, data_name = target
    for tensor in model.graph.initializer:
        raw = _bytes(tensor, path.parent, stored)
        if isinstance(raw, bytes) and len(raw) < MIN_BYTES:
            _inline(tensor, raw)  # small: in the graph (it may have been in a data file, removed below)
            continue
        key = raw if isinstance(raw, tuple) else _key(tensor, raw)
        if shared is not None and key in shared:
            _point(tensor, shared_name, *shared[key])
        else:
            _point(tensor, data_name, *_store(key, raw, data, stored))
    path.unlink()
    onnx.save(model, str(path))
    return old


def _bytes(tensor: onnx.TensorProto, directory: Path, stored: Stored) -> bytes | Key:
    """The tensor's bytes (inline, or read from its data file), or, for a weight whose place in a data file was met
    before, the key its bytes were stored under."""
    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        return tensor.raw_data  # b"" for a tensor in typed fields (a small constant): left as it is
    where = {entry.key: entry.value for entry in tensor.external_data}
    place = (where["location"], int(where.get("offset", 0)), int(where["length"]))
    if place[2] >= MIN_BYTES and place in stored.places:
        return stored.places[place]
    with (directory / place[0]).open("rb") as source:
        source.seek(place[1])
        raw = source.read(place[2])
    if len(raw) >= MIN_BYTES:
        stored.places[place] = _key(tensor, raw)
    return raw


def _point(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    """The tensor read from `length` bytes at `offset` in the data file `location` (onnx's external data fields)."""
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    tensor.data_location = onnx.TensorProto.EXTERNAL
    tensor.ClearField("raw_data")


def _inline(tensor: onnx.TensorProto, raw: bytes) -> None:
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
        tensor.raw_data = raw


def _key(tensor: onnx.TensorProto, raw: bytes) -> Key:
    return hashlib.sha256(raw).digest(), tensor.data_type, tuple(tensor.dims)


def _store(key: Key, raw: bytes | Key, data: BinaryIO, stored: Stored) -> tuple[int, int]:
    if key not in stored:
        assert isinstance(raw, bytes)  # a place met before gives a key that is stored
        offset = -data.tell() % ALIGN + data.tell()
        data.write(b"\0" * (offset - data.tell()))
        data.write(raw)
        stored[key] = (offset, len(raw))
    return stored[key]
