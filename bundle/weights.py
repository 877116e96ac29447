"""Weights held once: the tensors a graph reads from its data files, handed to its session from one in-memory copy.

onnxruntime reads a graph's external tensors into each session's own memory, so two sessions of graphs with the
same weights (a bundle's fast and attention fp32 graphs, which export writes to one data file: export.shared_weights)
would hold them twice. `Weights` maps each data file once, read-only (mmap), and gives every session an
OrtValue over the tensor's bytes in it (SessionOptions.add_initializer: onnxruntime uses the buffer, no copy), the
same OrtValue for the same bytes: one data file's tensor at one offset, as its sha256 in the manifest names it.
Old bundles, each graph with its own data file, load the same way (their tensors are simply not shared), and a graph
with its weights inline is left to onnxruntime. Pages of a mapped file are shared by every process that maps it.

Once the sessions are open and have run, `release` gives the mapped pages back (madvise MADV_DONTNEED): a session that
pre-packed its MatMuls never reads their original weights again, and every page read later is read back from the
page cache, so the process keeps resident only what its graphs read (an attention graph's weights once it runs).
Kept mapped, a 0.6B decoder's served process held its 2.4 GB file resident beside the pre-packed copy.

Pre-packing: onnxruntime re-lays a MatMul's constant weight out for its GEMM (bundle.session) in memory of the
session's own, so shared weights save their original copy, and pre-packing off saves the packed one too
(docs/performance.md, "Weights held once", measures both).
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Any

import numpy as np

from bundle.external_data import external_initializers
from bundle.manifest import GraphEntry

# onnx TensorProto.DataType -> numpy; another type (bfloat16) is left to onnxruntime to read
DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64, 9: np.bool_,
          10: np.float16, 11: np.float64}


class Weights:
    """One mapping per data file and one OrtValue per tensor, by content: for every session of one load."""

    def __init__(self) -> None:
        self._maps: dict[str, mmap.mmap] = {}  # data file sha256 -> its mapping, read-only
        self._files: dict[str, np.ndarray] = {}  # data file sha256 -> its bytes, as uint8 over the mapping
        self._values: dict[tuple[str, int, int], Any] = {}  # (data file sha256, offset, length) -> OrtValue

    def initializers(self, bundle_dir: Path, entry: GraphEntry) -> dict[str, Any]:
        """initializer name -> OrtValue for every external tensor of `entry`'s graph in a data file it lists."""
        import onnxruntime as ort

        values = {}
        for tensor in external_initializers(bundle_dir / entry.file):
            sha256 = entry.data_files.get(tensor.location)
            if sha256 is None or tensor.data_type not in DTYPES:
                continue
            key = (sha256, tensor.offset, tensor.length)
            if key not in self._values:
                data = self._mapped(bundle_dir / tensor.location, sha256)[tensor.offset: tensor.offset + tensor.length]
                array: np.ndarray = data.view(DTYPES[tensor.data_type]).reshape(tensor.dims)
                self._values[key] = ort.OrtValue.ortvalue_from_numpy(array)
            values[tensor.name] = self._values[key]
        return values

    def _mapped(self, path: Path, sha256: str) -> np.ndarray:
        if sha256 not in self._files:
            with path.open("rb") as file:
                self._maps[sha256] = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            self._files[sha256] = np.frombuffer(self._maps[sha256], dtype=np.uint8)
        return self._files[sha256]

    def release(self) -> None:
        """This process's resident pages of every mapped file given back (module docstring); the mappings stay,
        and a page read again is read back from the page cache. Where madvise is not offered, nothing changes."""
        for mapping in self._maps.values():
            if hasattr(mapping, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
                mapping.madvise(mmap.MADV_DONTNEED)

    @property
    def tensors(self) -> int:
        return len(self._values)
