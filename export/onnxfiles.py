"""Where export writes an ONNX graph: one .onnx file, or, for a large graph, the .onnx and one data file.

A serialised ONNX model is one protobuf message, and protobuf refuses messages over 2 GiB: a 0.6B-parameter
model's fp32 weights (2.4 GB) cannot be in its .onnx. A graph whose weights pass EXTERNAL_DATA_BYTES (half
the limit: the margin covers graph structure and the copies a variant adds) is written with its tensors in
one external data file beside it, `{graph file name}.data` (`fast-fp32.onnx.data`), which the graph names
by that plain name; onnxruntime reads it when it opens the graph by path (bundle.session). The manifest lists
the data file with its sha256 (bundle.manifest GraphEntry.data_files).

A graph derived from another (export.variants, export.int8, export.smoothing) is written large when its
source is: fp16 and int8 shrink the weights, but a 0.6B model's are still over the threshold in every variant.

Once every graph is built and gated, the fp32 and fp32-opt graphs, large or not, are rewritten to read one shared
file instead (export.shared_weights), so only the int8 and fp16 graphs of a large model keep a data file of their own.

Every writer here and in onnx / onnxruntime *appends* to an existing data file, so each write first removes
the target's (`clear`): the int8 loops write the same path once per attempt.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import onnx

from bundle.external_data import external_locations
from bundle.files import sha256_file

# Weights over this many bytes go to an external data file (protobuf's limit is 2 GiB). Tests lower it.
EXTERNAL_DATA_BYTES = 1 << 30


def data_name(path: Path) -> str:
    """The one external data file of the graph at `path`: "fast-fp32.onnx" -> "fast-fp32.onnx.data"."""
    return f"{Path(path).name}.data"


def is_large(weight_bytes: int) -> bool:
    """Whether a graph with `weight_bytes` of tensors is written with external data (read at call time, so a
    test's lowered EXTERNAL_DATA_BYTES applies)."""
    return weight_bytes > EXTERNAL_DATA_BYTES


def graph_bytes(path: Path) -> int:
    """Bytes of the graph at `path` on disk: the .onnx and every data file it reads."""
    path = Path(path)
    return path.stat().st_size + sum((path.parent / name).stat().st_size for name in external_locations(path))


def large_graph(path: Path) -> bool:
    """Whether the graph at `path` is large, so that what is derived from it is written large too."""
    return is_large(graph_bytes(path))


def clear(path: Path) -> None:
    """Remove the graph at `path` and its data file, if there: a write must not append to an old one."""
    path = Path(path)
    path.unlink(missing_ok=True)
    (path.parent / data_name(path)).unlink(missing_ok=True)


def save(model: onnx.ModelProto, path: Path, large: bool) -> None:
    """`model` to `path`: one file, or (large) with its tensors in data_name(path). A large save moves the
    tensors out of `model` (it holds no weights afterwards)."""
    clear(path)
    if large:
        onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=data_name(path))
    else:
        onnx.save(model, str(path))


def make_readable(path: Path) -> None:
    """Let everyone read the graph's data files, as every bundle file: onnx creates them owner-only (0600),
    and a bundle is shared read-only (bundle.files.staged_directory), e.g. with a server's non-root user."""
    path = Path(path)
    for name in external_locations(path):
        os.chmod(path.parent / name, 0o644)


def data_files(path: Path) -> dict[str, str]:
    """The manifest's `data_files` of the graph at `path`: each data file it reads -> its sha256. A file that several
    graphs read (the shared weights, gigabytes for a large model) is hashed once while it stays unchanged."""
    path = Path(path)
    hashed = {}
    for name in sorted(external_locations(path)):
        file = (path.parent / name).resolve()
        status = file.stat()
        hashed[name] = _sha256(file, status.st_size, status.st_mtime_ns, status.st_ino)
    return hashed


@functools.lru_cache(maxsize=16)
def _sha256(path: Path, size: int, mtime_ns: int, inode: int) -> str:
    """sha256_file, remembered by the file's size, modification time and inode (a rewritten file is hashed again)."""
    return sha256_file(path)
