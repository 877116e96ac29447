"""Bad bundles: the server refuses to become ready, says which file is at fault, and never answers.

Each case is a copy of the tiny bundle with one thing broken; where a file is edited, the manifest's
sha256 is fixed to match, so the check that must catch it is the one after the hash (the onnxruntime
load, the output-name comparison, the tokenizer load, the warm-up). All servers are started at once
(`python -m attnserve serve`, as in the Docker image) and watched: every one must exit non-zero,
/ready must never answer 200, and the log must name the file (or manifest field).
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from bundle.files import sha256_file
from tests.helpers.process import Server, launch_server, stop

FAST, ATTENTION, TOKENIZER, MANIFEST = "fast-fp32.onnx", "attention-fp32.onnx", "tokenizer.json", "manifest.json"


def edit_manifest(bundle: Path, change: Callable[[dict], None]) -> None:
    manifest = json.loads((bundle / MANIFEST).read_text())
    change(manifest)
    (bundle / MANIFEST).write_text(json.dumps(manifest))


def rehash(bundle: Path, file: str) -> None:
    """Make the manifest's sha256 for `file` match its (edited) bytes."""
    digest = sha256_file(bundle / file)

    def change(manifest: dict) -> None:
        if file == manifest["tokenizer"]:
            manifest["tokenizer_sha256"] = digest
        for graph in manifest["graphs"]:
            if graph["file"] == file:
                graph["sha256"] = digest

    edit_manifest(bundle, change)


def inlined(bundle: Path, file: str) -> None:
    """The manifest lists no data file for `file`: onnx.save wrote the graph with every weight inside it (a bundle's
    fp32 graphs read their weights from the shared weights file, export.shared_weights)."""
    edit_manifest(bundle, lambda m: [g.__setitem__("data_files", {}) for g in m["graphs"] if g["file"] == file])


def truncate(bundle: Path, file: str) -> None:
    data = (bundle / file).read_bytes()
    (bundle / file).write_bytes(data[: len(data) // 2])


def random_bytes(bundle: Path, file: str) -> None:
    (bundle / file).write_bytes(random.Random(0).randbytes((bundle / file).stat().st_size))


def rename_output(bundle: Path) -> None:
    """`embeddings` -> `pooled_output` in the graph itself (graph output, and the nodes using it)."""
    model = onnx.load(bundle / FAST)
    for node in model.graph.node:
        for names in (node.input, node.output):
            names[:] = ["pooled_output" if name == "embeddings" else name for name in names]
    for output in model.graph.output:
        if output.name == "embeddings":
            output.name = "pooled_output"
    onnx.checker.check_model(model)
    onnx.save(model, bundle / FAST)


def nan_weights(bundle: Path) -> None:
    """Every float weight NaN: a graph that loads and runs, and answers NaN for everything."""
    model = onnx.load(bundle / FAST)
    for tensor in model.graph.initializer:
        values = numpy_helper.to_array(tensor)
        if values.dtype == np.float32 and values.size > 1:
            tensor.CopyFrom(numpy_helper.from_array(np.full_like(values, np.nan), tensor.name))
    onnx.save(model, bundle / FAST)


def set_graph(field: str, value: str, index: int = 0) -> Callable[[Path], None]:
    return lambda b: edit_manifest(b, lambda m: m["graphs"][index].__setitem__(field, value))


# name -> (how to break a copy of the bundle, what the log must say)
CASES: dict[str, tuple[Callable[[Path], None], list[str]]] = {
    "manifest_missing": (lambda b: (b / MANIFEST).unlink(), [MANIFEST, "not found"]),
    "manifest_not_json": (lambda b: (b / MANIFEST).write_text("{not json"), [MANIFEST]),
    "graph_missing": (lambda b: (b / FAST).unlink(), [FAST, "missing"]),
    "graph_truncated_same_hash": (lambda b: truncate(b, FAST), [FAST, "sha256"]),
    "graph_truncated": (lambda b: (truncate(b, FAST), rehash(b, FAST)), [FAST, "cannot load"]),
    "graph_random_bytes": (lambda b: (random_bytes(b, ATTENTION), rehash(b, ATTENTION)), [ATTENTION, "cannot load"]),
    "tokenizer_missing": (lambda b: (b / TOKENIZER).unlink(), [TOKENIZER, "missing"]),
    "tokenizer_corrupt": (lambda b: (random_bytes(b, TOKENIZER), rehash(b, TOKENIZER)), [TOKENIZER]),
    "tokenizer_not_a_tokenizer": (lambda b: ((b / TOKENIZER).write_text('{"model": 1}'), rehash(b, TOKENIZER)),
                                  [TOKENIZER]),
    "output_renamed": (lambda b: (rename_output(b), rehash(b, FAST), inlined(b, FAST)),
                       [FAST, "outputs", "pooled_output:"]),
    "manifest_hash_mismatch": (set_graph("sha256", "0" * 64, 1), [ATTENTION, "sha256"]),
    "graph_path_parent": (set_graph("file", "../" + FAST), ["graphs.0.file", "not a plain file name"]),
    "graph_path_absolute": (set_graph("file", "/etc/passwd"), ["graphs.0.file", "not a plain file name"]),
    "tokenizer_path_parent": (lambda b: edit_manifest(b, lambda m: m.__setitem__("tokenizer", "../" + TOKENIZER)),
                              ["field tokenizer", "not a plain file name"]),
    "nan_weights": (lambda b: (nan_weights(b), rehash(b, FAST), inlined(b, FAST)), ["NaN or Inf"]),
}


@pytest.fixture(scope="module")
def outcomes(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, bool, str]]:
    """name -> (exit status, whether /ready ever answered 200, log) for every case, run concurrently."""
    root = tmp_path_factory.mktemp("bad")
    servers: dict[str, Server] = {}
    for name, (breaks, _) in CASES.items():
        shutil.copytree(tiny_bundle, root / name)
        breaks(root / name)
        servers[name] = launch_server(root / name, root / f"{name}.log")
    served = dict.fromkeys(servers, False)
    deadline = time.monotonic() + 120  # generous: each exits within a few seconds of starting
    while time.monotonic() < deadline and any(s.proc.poll() is None for s in servers.values()):
        for name, server in servers.items():
            if server.proc.poll() is None:
                with contextlib.suppress(httpx.TransportError):
                    served[name] |= httpx.get(f"{server.url}/ready", timeout=0.2).status_code == 200
        time.sleep(0.2)
    results = {}
    for name, server in servers.items():
        status, log = stop(server)  # a process still up at the deadline is stopped and fails below
        results[name] = (status, served[name], log)
    return results


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_bundle_never_becomes_ready(outcomes, case: str) -> None:
    status, served, log = outcomes[case]
    assert status != 0 and status != -15, f"exit status {status}:\n{log}"  # -15: still up, stopped by SIGTERM
    assert not served, log
    for words in CASES[case][1]:
        assert words in log, f"{words!r} not in the log:\n{log}"
    assert len(log.splitlines()) < 80, log  # a clear message, not pages of traceback
