"""Which external data files an ONNX graph reads its tensors from, read off the graph file without `onnx`.

A graph over protobuf's 2 GiB limit keeps its tensors in a data file beside the .onnx; each such tensor
names its file in `external_data` ("location", a path relative to the graph's directory). verify_bundle must
know every file a graph will make onnxruntime read, so that each one is listed in the manifest and hashed:
an unlisted file would be weights nobody checked.

The service's image carries onnxruntime but not the `onnx` package, so this reads the protobuf wire format
itself, following only the fields that can lead to a TensorProto (onnx/onnx.proto: a graph's initializers
and sparse initializers, node attributes' tensors and subgraphs, functions, training graphs). The file is
memory-mapped and every other field is skipped by its length, so a 2 GB graph with inline weights costs
a walk over its field headers, not a read of its weights.

`external_initializers` reads more of the same walk: each top-level initializer stored outside the graph, with its
name, element type, dims and place in its file, so the service can hand one in-memory copy of a tensor to every
session whose graph reads it (bundle.weights).
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

# message -> {field number: message it holds}, for the fields on a path to a TensorProto's external_data
_MODEL, _GRAPH, _NODE, _ATTRIBUTE, _FUNCTION, _TRAINING, _SPARSE, _TENSOR, _ENTRY = range(9)
_CHILDREN: dict[int, dict[int, int]] = {
    _MODEL: {7: _GRAPH, 20: _TRAINING, 25: _FUNCTION},
    _GRAPH: {1: _NODE, 5: _TENSOR, 15: _SPARSE},
    _NODE: {5: _ATTRIBUTE},
    _ATTRIBUTE: {5: _TENSOR, 6: _GRAPH, 10: _TENSOR, 11: _GRAPH, 22: _SPARSE, 23: _SPARSE},
    _FUNCTION: {7: _NODE, 11: _ATTRIBUTE},
    _TRAINING: {1: _GRAPH, 2: _GRAPH},
    _SPARSE: {1: _TENSOR, 2: _TENSOR},
    _TENSOR: {13: _ENTRY},  # external_data: StringStringEntryProto (key 1, value 2)
}
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
T = TypeVar("T")


# onnx TensorProto.DataType -> bytes per element, for the types a bundle's initializers have
ELEMENT_BYTES = {1: 4, 2: 1, 3: 1, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 16: 2}


class GraphFileError(ValueError):
    """The file is not a protobuf message this reader can walk."""


@dataclass(frozen=True)
class ExternalTensor:
    """A graph's initializer stored outside it: `length` bytes at `offset` of `location`."""

    name: str
    data_type: int  # onnx TensorProto.DataType (1: float32)
    dims: tuple[int, ...]
    location: str
    offset: int
    length: int


def external_locations(path: Path) -> set[str]:
    """The `location` of every tensor of the graph at `path` stored outside it, as written (relative paths)."""
    return set(_walk(path, lambda view: _locations(view, 0, len(view), _MODEL)))


def external_initializers(path: Path) -> list[ExternalTensor]:
    """The top-level initializers of the graph at `path` that are stored outside it, in the graph's order."""
    return _walk(path, _initializers)


def _walk(path: Path, read: Callable[[memoryview], list[T]]) -> list[T]:
    with Path(path).open("rb") as fh:
        if fh.seek(0, 2) == 0:
            return []
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                return read(view)
            finally:
                view.release()


def _initializers(buf: memoryview) -> list[ExternalTensor]:
    found = []
    for number, wire, start, end in _fields(buf, 0, len(buf)):
        if number == 7 and wire == _LENGTH:  # ModelProto.graph
            found += [t for n, w, s, e in _fields(buf, start, end)
                      if n == 5 and w == _LENGTH and (t := _tensor(buf, s, e)) is not None]  # GraphProto.initializer
    return found


def _tensor(buf: memoryview, start: int, end: int) -> ExternalTensor | None:
    """A TensorProto's dims (1), data_type (2), name (8) and external_data (13); None when stored inline."""
    dims: list[int] = []
    data_type, name, entries = 0, "", {}
    for number, wire, value_start, value_end in _fields(buf, start, end):
        if number == 1:
            dims += _packed(buf, value_start, value_end) if wire == _LENGTH else [_varint(buf, value_start, end)[0]]
        elif number == 2 and wire == _VARINT:
            data_type = _varint(buf, value_start, end)[0]
        elif number == 8 and wire == _LENGTH:
            name = bytes(buf[value_start:value_end]).decode("utf-8", "replace")
        elif number == 13 and wire == _LENGTH:
            entry = {n: bytes(buf[s:e]).decode("utf-8", "replace")
                     for n, _, s, e in _fields(buf, value_start, value_end)}
            entries[entry.get(1, "")] = entry.get(2, "")
    if "location" not in entries:
        return None
    length = int(entries["length"]) if "length" in entries else math.prod(dims) * ELEMENT_BYTES.get(data_type, 0)
    return ExternalTensor(name, data_type, tuple(dims), entries["location"], int(entries.get("offset", 0)), length)


def _packed(buf: memoryview, pos: int, end: int) -> list[int]:
    values = []
    while pos < end:
        value, pos = _varint(buf, pos, end)
        values.append(value)
    return values


def _locations(buf: memoryview, start: int, end: int, message: int) -> list[str]:
    children = _CHILDREN.get(message, {})
    found: list[str] = []
    entry: dict[int, str] = {}  # a StringStringEntryProto's key (1) and value (2)
    for number, wire, value_start, value_end in _fields(buf, start, end):
        if message == _ENTRY and wire == _LENGTH and number in (1, 2):
            entry[number] = bytes(buf[value_start:value_end]).decode("utf-8", "replace")
        elif number in children and wire == _LENGTH:
            found += _locations(buf, value_start, value_end, children[number])
    if message == _ENTRY and entry.get(1) == "location":
        found.append(entry.get(2, ""))
    return found


def _fields(buf: memoryview, pos: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, value start, value end) of each field of the message in buf[pos:end]."""
    while pos < end:
        tag, pos = _varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if wire == _VARINT:
            _, value_end = _varint(buf, pos, end)
        elif wire == _LENGTH:
            length, pos = _varint(buf, pos, end)
            value_end = pos + length
        elif wire in (_FIXED64, _FIXED32):
            value_end = pos + (8 if wire == _FIXED64 else 4)
        else:  # groups (3, 4) are not used by onnx.proto
            raise GraphFileError(f"wire type {wire} of field {number} at byte {pos}: not an ONNX model")
        if value_end > end:
            raise GraphFileError(f"field {number} at byte {pos} runs past its message: a truncated file?")
        yield number, wire, pos, value_end
        pos = value_end


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    while pos < end:
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return value, pos
        if shift > 63:
            break
    raise GraphFileError(f"a malformed varint at byte {pos}: not an ONNX model")
