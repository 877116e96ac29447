"""Large graphs: weights in an external data file, listed and hashed in the manifest, verified, served.

The threshold (export.onnxfiles.EXTERNAL_DATA_BYTES) is lowered to 0 so the tiny model is written as a 2 GB
one would be; its graphs are compared with the ordinary export of the same checkpoint (tiny_bundle). The real
size is measured by bench/large_export.py (docs/export.md, "Large models").
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer

from bundle.external_data import external_locations
from bundle.feeds import pad
from bundle.files import sha256_file
from bundle.verify import BundleError, verify_bundle
from export import onnxfiles, variants
from export.bundle import export_bundle
from inference.options import ServingOptions
from inference.registry import ServedBundle, load_bundles, start_models
from inference.runtime.graphs import FAST, TokenSequence
from inference.tasks import embed
from model.config import EncoderConfig
from model.load import load_model
from tests.helpers.tiny import SENTENCES

VARIANTS = ("fp32", "fp32-opt")


@pytest.fixture(scope="module")
def large_bundle(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny_checkpoint exported as a large model: every graph's weights in its own data file."""
    out = tmp_path_factory.mktemp("external") / "large"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(onnxfiles, "EXTERNAL_DATA_BYTES", 0)
        export_bundle(tiny_checkpoint, out, variants=VARIANTS)
    return out


def _feeds(bundle: Path, names: list[str]) -> dict[str, np.ndarray]:
    tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    return pad([e.ids for e in tokenizer.encode_batch(SENTENCES[:6])], 0, names)


def _run(path: Path) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = _feeds(path.parent, [i.name for i in session.get_inputs()])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))


def test_every_graph_lists_its_data_file_with_its_hash(large_bundle: Path) -> None:
    manifest = verify_bundle(large_bundle)
    assert {(g.kind, g.variant) for g in manifest.graphs} == {*(("fast", v) for v in VARIANTS), ("attention", "fp32")}
    for graph in manifest.graphs:
        data = f"{graph.file}.data"
        assert graph.data_files == {data: sha256_file(large_bundle / data)}, graph.file
        assert external_locations(large_bundle / graph.file) == {data}
        assert os.stat(large_bundle / data).st_mode & 0o777 == 0o644, data  # readable as every bundle file
    files = {g.file for g in manifest.graphs} | {f"{g.file}.data" for g in manifest.graphs}
    assert set(os.listdir(large_bundle)) == files | {"manifest.json", "tokenizer.json"}  # no staged leftovers


def test_manifests_without_data_files_read_as_before(tiny_bundle: Path, large_bundle: Path) -> None:
    """An ordinary bundle's manifest has no data_files key, so readers that predate it still read it; one that
    lists data files is refused by those readers (their schema forbids unknown fields)."""
    assert "data_files" not in (tiny_bundle / "manifest.json").read_text()
    graphs = json.loads((large_bundle / "manifest.json").read_text())["graphs"]
    assert all(g["data_files"] for g in graphs)


@pytest.mark.parametrize("kind,variant", [("fast", "fp32"), ("attention", "fp32"), ("fast", "fp32-opt")])
def test_graphs_give_the_ordinary_exports_numbers(large_bundle: Path, tiny_bundle: Path, kind: str,
                                                  variant: str) -> None:
    got, want = _run(large_bundle / f"{kind}-{variant}.onnx"), _run(tiny_bundle / f"{kind}-fp32.onnx")
    assert set(got) == set(want)
    for name, value in want.items():
        assert np.abs(got[name] - value).max() <= 1e-5, (kind, variant, name)


BUILDERS: dict[str, tuple[Callable[[Path, Path, EncoderConfig], Any], float]] = {  # variant: (builder, min cosine)
    "int8-dynamic": (variants.quantize, 0.99), "fp16": (lambda src, dst, config: variants.to_fp16(src, dst), 0.999)}


@pytest.mark.parametrize("variant", BUILDERS)
def test_quantised_variants_of_a_large_graph_write_their_own_data_file(
    large_bundle: Path, tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variant: str,
) -> None:
    """Built twice into the same path (the int8 loops rewrite theirs), as the export builds them (not gated here:
    tests/export/test_variants.py gates them): one data file of the same bytes each time, never appended to."""
    monkeypatch.setattr(onnxfiles, "EXTERNAL_DATA_BYTES", 0)
    build, min_cosine = BUILDERS[variant]
    src, dst = tmp_path / "fast-fp32.onnx", tmp_path / f"fast-{variant}.onnx"
    for name in ("fast-fp32.onnx", "fast-fp32.onnx.data", "tokenizer.json"):  # a directory of its own
        shutil.copyfile(large_bundle / name, tmp_path / name)
    config = load_model(tiny_checkpoint).encoder.config
    build(src, dst, config)
    first = onnxfiles.data_files(dst)
    build(src, dst, config)
    assert onnxfiles.data_files(dst) == first and list(first) == [f"{dst.name}.data"]
    got, want = _run(dst)["embeddings"], _run(src)["embeddings"]
    cosine = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
    assert cosine.min() >= min_cosine, variant


def _flip_a_byte(bundle: Path) -> None:
    path = bundle / "fast-fp32.onnx.data"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _edit_manifest(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    """Change the fast fp32 graph's entry in a bundle's manifest.json."""
    def edit(bundle: Path) -> None:
        manifest = json.loads((bundle / "manifest.json").read_text())
        change(next(g for g in manifest["graphs"] if g["file"] == "fast-fp32.onnx"))
        (bundle / "manifest.json").write_text(json.dumps(manifest))
    return edit


def _outside(bundle: Path) -> None:
    outside = bundle.parent / "elsewhere.data"
    shutil.copyfile(bundle / "fast-fp32.onnx.data", outside)
    (bundle / "fast-fp32.onnx.data").unlink()
    (bundle / "fast-fp32.onnx.data").symlink_to(outside)


TAMPERING = {
    "altered": (_flip_a_byte, r"fast-fp32.onnx.data: sha256 \w+ does not match the manifest's"),
    "missing": (lambda b: (b / "fast-fp32.onnx.data").unlink(),
                "fast-fp32.onnx.data: listed in the manifest but missing"),
    "unlisted": (_edit_manifest(lambda g: g.pop("data_files")),
                 "fast-fp32.onnx: reads tensors from fast-fp32.onnx.data, which the manifest does not list"),
    "listed, not read": (_edit_manifest(lambda g: g["data_files"].update({"tokenizer.json": "0" * 64})),
                         "fast-fp32.onnx: the manifest lists data files tokenizer.json the graph does not read"),
    "not a plain name": (_edit_manifest(lambda g: g.update(data_files={"../x.data": "0" * 64})),
                         r"field graphs.0.data_files: Value error, '../x.data' is not a plain file name"),
    "outside the bundle": (_outside, "fast-fp32.onnx.data: resolves outside the bundle directory"),
}


@pytest.mark.parametrize("case", TAMPERING)
def test_a_tampered_missing_or_unlisted_data_file_is_refused(large_bundle: Path, tmp_path: Path, case: str) -> None:
    copy = Path(shutil.copytree(large_bundle, tmp_path / "b"))
    tamper, message = TAMPERING[case]
    tamper(copy)
    with pytest.raises(BundleError, match=message):
        verify_bundle(copy)


def test_locations_are_read_from_every_place_onnx_keeps_tensors(tmp_path: Path) -> None:
    """An initializer, a Constant node's tensor and a subgraph's initializer, each in a file of its own name
    (onnx's writer), are all found; a graph with its tensors inline reads none; a truncated one is refused."""
    def tensor(name: str) -> TensorProto:
        return numpy_helper.from_array(np.ones((32, 32), np.float32), name)

    def graph(name: str, nodes: list[onnx.NodeProto], out: str, inits: list[TensorProto]) -> onnx.GraphProto:
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)

    branch = graph("then", [helper.make_node("Identity", ["sub"], ["a"])], "a", [tensor("sub")])
    other = graph("else", [helper.make_node("Identity", ["init"], ["b"])], "b", [])
    nodes = [helper.make_node("Constant", [], ["c"], value=tensor("const")),
             helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=other)]
    model = helper.make_model(graph("g", nodes, "y", [tensor("init")]))
    model.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    onnx.save(model, str(tmp_path / "inline.onnx"))
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=False,
              size_threshold=0, convert_attribute=True)
    assert external_locations(tmp_path / "m.onnx") == {"init", "const", "sub"}
    assert external_locations(tmp_path / "inline.onnx") == set()
    (tmp_path / "cut.onnx").write_bytes((tmp_path / "inline.onnx").read_bytes()[:-100])
    with pytest.raises(ValueError, match="runs past its message"):
        external_locations(tmp_path / "cut.onnx")


async def _embed(bundle: Path) -> tuple[np.ndarray, str]:
    """SENTENCES' vectors from the inference core serving `bundle`'s fp32 graph, and its fingerprint."""
    options = ServingOptions(variant="fp32", intra_op_threads=1)
    models, executors = start_models(["m"], load_bundles([ServedBundle(path=bundle)], options), options)
    try:
        return (await embed.embed(models.default, SENTENCES)).vectors, models.default.bundle.fingerprint
    finally:
        await models.default.batcher.stop()
        for executor in executors:
            executor.shutdown()


async def test_the_large_bundle_serves_through_the_core(large_bundle: Path, tiny_bundle: Path) -> None:
    (got, _), (want, _) = await _embed(large_bundle), await _embed(tiny_bundle)
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-5


def _other_weights(bundle: Path, into: Path) -> Path:
    """A copy of `bundle` whose fast graph has the same .onnx but other weights in its data file (as two
    fine-tunes of one architecture can), listed with their new hash."""
    copy = Path(shutil.copytree(bundle, into))
    data = copy / "fast-fp32.onnx.data"
    data.write_bytes((np.frombuffer(data.read_bytes(), np.float32) * np.float32(1.5)).tobytes())
    _edit_manifest(lambda g: g["data_files"].update({data.name: sha256_file(data)}))(copy)
    return copy


def test_same_graph_file_other_weights_is_another_model(large_bundle: Path, tmp_path: Path) -> None:
    """Two bundles whose graphs share the .onnx but not the data file get a session each (sessions are shared by
    content, weights included) and different fingerprints (the answer cache keys by them)."""
    other = _other_weights(large_bundle, tmp_path / "other")
    first, second = load_bundles([ServedBundle(path=large_bundle), ServedBundle(path=other)],
                                 ServingOptions(variant="fp32", intra_op_threads=1))
    assert sha256_file(large_bundle / "fast-fp32.onnx") == sha256_file(other / "fast-fp32.onnx")
    assert first.fingerprint != second.fingerprint
    ids = np.array(Tokenizer.from_file(str(other / "tokenizer.json")).encode(SENTENCES[0]).ids)
    (a,), (b,) = first.run_batch(FAST, [TokenSequence(ids)]), second.run_batch(FAST, [TokenSequence(ids)])
    assert np.abs(a["embeddings"] - b["embeddings"]).max() > 1e-3
