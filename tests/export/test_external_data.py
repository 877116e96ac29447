"""Large graphs: weights in an external data file, listed and hashed in the manifest, verified, served; the fast
and attention fp32 graphs' weights in one shared file (export.shared_weights), held once when served (bundle.weights).

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

from bundle.external_data import external_initializers, external_locations
from bundle.feeds import pad
from bundle.files import sha256_file
from bundle.manifest import Manifest
from bundle.verify import BundleError, verify_bundle
from export import bundle as export_module
from export import onnxfiles, variants
from export.bundle import export_bundle
from export.shared_weights import SHARED_DATA
from inference.options import LoadOptions, ServingOptions
from inference.registry import ServedBundle, load_bundles
from inference.runtime.graphs import FAST, TokenSequence
from inference.runtime.loading import load_bundle
from inference.tasks import embed
from model.config import EncoderConfig
from model.load import load_model
from tests.helpers.serving import core
from tests.helpers.tiny import SENTENCES

VARIANTS = ("fp32", "fp32-opt")


@pytest.fixture(scope="module")
def large_bundle(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny_checkpoint exported as a large model: every graph's weights in the one shared file."""
    out = tmp_path_factory.mktemp("external") / "large"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(onnxfiles, "EXTERNAL_DATA_BYTES", 0)
        export_bundle(tiny_checkpoint, out, variants=VARIANTS)
    return out


@pytest.fixture(scope="module")
def unshared_bundle(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A large bundle as export wrote it before the shared file: every graph's weights in its own data file."""
    out = tmp_path_factory.mktemp("external") / "unshared"
    derive = export_module.fast_from_attention

    def own_copy(attention: Path, fast: Path) -> None:  # the derived fast graph's weights copied into its own file
        derive(attention, fast)
        onnxfiles.save(onnx.load(str(fast)), fast, large=True)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(onnxfiles, "EXTERNAL_DATA_BYTES", 0)
        patch.setattr(export_module, "SHARED_VARIANTS", ())
        patch.setattr(export_module, "fast_from_attention", own_copy)
        export_bundle(tiny_checkpoint, out, variants=VARIANTS)
    return out


def _data_files(graph_file: str) -> set[str]:
    """The data files a graph of the large bundle reads: the shared one for the fp32 graphs; it and one of its own
    (its fused tensors) for fp32-opt."""
    if graph_file.endswith("-fp32.onnx"):
        return {SHARED_DATA}
    return {SHARED_DATA, f"{graph_file}.data"} if graph_file.endswith("-fp32-opt.onnx") else {f"{graph_file}.data"}


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
        data = _data_files(graph.file)
        assert graph.data_files == {name: sha256_file(large_bundle / name) for name in data}, graph.file
        assert external_locations(large_bundle / graph.file) == data
        for name in data:
            assert os.stat(large_bundle / name).st_mode & 0o777 == 0o644, name  # readable as every bundle file
    files = {g.file for g in manifest.graphs} | {name for g in manifest.graphs for name in _data_files(g.file)}
    assert set(os.listdir(large_bundle)) == files | {"manifest.json", "tokenizer.json"}  # no staged leftovers


def test_manifests_without_data_files_read_as_before(tiny_bundle: Path, large_bundle: Path) -> None:
    """A graph in one file has no data_files key in the manifest, as before the key existed; a graph that reads data
    files lists them (readers that predate the key refuse it: their schema forbids unknown fields)."""
    entry = Manifest.read(tiny_bundle).graphs[0]
    assert "data_files" not in entry.model_copy(update={"data_files": {}}).model_dump()
    for bundle in (tiny_bundle, large_bundle):  # the fp32 and fp32-opt graphs read the shared file, whatever the size
        assert all(g["data_files"] for g in json.loads((bundle / "manifest.json").read_text())["graphs"])


def test_the_fp32_graphs_hold_their_weights_once(tiny_bundle: Path, large_bundle: Path, unshared_bundle: Path) -> None:
    """The fast and the attention fp32 graph read one data file, each of its tensors once, at the same places, and
    fp32-opt reads from it all but its fused tensors: the two files are well under the three graphs' own data
    files. The attention graph's layer and head indices (small) stay in the graph."""
    for bundle in (tiny_bundle, large_bundle):
        fast, attention = (external_initializers(bundle / f"{k}-fp32.onnx") for k in ("fast", "attention"))
        places = {(t.location, t.offset, t.length) for t in fast}
        assert places and places == {(t.location, t.offset, t.length) for t in attention}, bundle
    unshared = sum((unshared_bundle / f"{g}.onnx.data").stat().st_size
                   for g in ("fast-fp32", "fast-fp32-opt", "attention-fp32"))
    shared = sum((large_bundle / name).stat().st_size for name in (SHARED_DATA, "fast-fp32-opt.onnx.data"))
    assert shared < unshared / 2, (shared, unshared)


def test_the_fp32_graphs_store_weights_as_matmul_reads_them(tiny_bundle: Path) -> None:
    """No Transpose of a weight is left for onnxruntime to fold into a session's own copy (export.folding)."""
    for kind in ("fast", "attention"):
        model = onnx.load(str(tiny_bundle / f"{kind}-fp32.onnx"), load_external_data=False)
        weights = {t.name for t in model.graph.initializer}
        assert not [n.name for n in model.graph.node if n.op_type == "Transpose" and n.input[0] in weights], kind


def test_served_fast_and_attention_graphs_share_one_copy(large_bundle: Path, unshared_bundle: Path) -> None:
    """Loaded together, the fast and attention fp32 sessions are given the same OrtValues, one per tensor of the
    shared file; an older bundle (a data file per graph) loads as well, sharing only data files of equal bytes."""
    loaded = load_bundle(large_bundle, LoadOptions(variant="fp32", intra_op_threads=1))
    fast, attention = (loaded.graphs[k].session.attnserve_initializers for k in ("fast", "attention"))
    assert fast and {id(v) for v in fast.values()} == {id(v) for v in attention.values()}
    older = load_bundle(unshared_bundle, LoadOptions(variant="fp32", intra_op_threads=1))
    assert set(older.graphs) == set(loaded.graphs) and older.graphs["attention"].session.attnserve_initializers


async def test_the_mapped_weights_are_given_back_once_the_sessions_ran(large_bundle: Path, tmp_path: Path) -> None:
    """After the load's first runs none of the shared file's pages is resident (the fast session packed its MatMuls
    in memory of its own); the attention graph's run reads them back in from the page cache, with the numbers a
    session that read the file itself gives, and the served model's warm-up (which runs it too) gives them back."""
    bundle = Path(shutil.copytree(large_bundle, tmp_path / "bundle"))  # a path no other test of the process maps
    loaded = load_bundle(bundle, LoadOptions(variant="fp32", intra_op_threads=1))
    data = (bundle / SHARED_DATA).resolve()
    assert _resident_kb(data) == 0
    session = loaded.graphs["attention"].session
    feeds = _feeds(bundle, [i.name for i in session.get_inputs()])
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
    want = _run(bundle / "attention-fp32.onnx")
    assert all(np.array_equal(got[name], want[name]) for name in want)
    assert _resident_kb(data) > 0
    options = ServingOptions(variant="fp32", intra_op_threads=1)
    async with core(loaded, options) as model:
        await model.warm_up()
    assert _resident_kb(data) == 0


def _resident_kb(path: Path) -> int:
    """This process's resident kB of its mappings of `path` (/proc/self/smaps)."""
    total, mapped = 0, ""
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and not fields[0].endswith(":"):  # a mapping's header: range, perms, offset, device, inode, path
            mapped = fields[5] if len(fields) > 5 else ""
        elif fields and fields[0] == "Rss:" and mapped == str(path):
            total += int(fields[1])
    return total


@pytest.mark.parametrize("kind", ["fast", "attention"])
def test_the_shared_and_unshared_graphs_give_the_same_numbers(large_bundle: Path, unshared_bundle: Path,
                                                               kind: str) -> None:
    got, want = _run(large_bundle / f"{kind}-fp32.onnx"), _run(unshared_bundle / f"{kind}-fp32.onnx")
    assert all(np.array_equal(got[name], want[name]) for name in want), kind


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
    for name in ("fast-fp32.onnx", SHARED_DATA, "tokenizer.json"):  # a directory of its own
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
    path = bundle / SHARED_DATA
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
    shutil.copyfile(bundle / SHARED_DATA, outside)
    (bundle / SHARED_DATA).unlink()
    (bundle / SHARED_DATA).symlink_to(outside)


TAMPERING = {
    "altered": (_flip_a_byte, rf"{SHARED_DATA}: sha256 \w+ does not match the manifest's"),
    "missing": (lambda b: (b / SHARED_DATA).unlink(), f"{SHARED_DATA}: listed in the manifest but missing"),
    "unlisted": (_edit_manifest(lambda g: g.pop("data_files")),
                 f"fast-fp32.onnx: reads tensors from {SHARED_DATA}, which the manifest does not list"),
    "listed, not read": (_edit_manifest(lambda g: g["data_files"].update({"tokenizer.json": "0" * 64})),
                         "fast-fp32.onnx: the manifest lists data files tokenizer.json the graph does not read"),
    "not a plain name": (_edit_manifest(lambda g: g.update(data_files={"../x.data": "0" * 64})),
                         r"field graphs.0.data_files: Value error, '../x.data' is not a plain file name"),
    "outside the bundle": (_outside, f"{SHARED_DATA}: resolves outside the bundle directory"),
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
    top = [(t.name, t.data_type, t.dims, t.location, t.offset, t.length)
           for t in external_initializers(tmp_path / "m.onnx")]
    assert top == [("init", TensorProto.FLOAT, (32, 32), "init", 0, 32 * 32 * 4)]  # the graph's own initializers only
    assert external_initializers(tmp_path / "inline.onnx") == []
    (tmp_path / "cut.onnx").write_bytes((tmp_path / "inline.onnx").read_bytes()[:-100])
    with pytest.raises(ValueError, match="runs past its message"):
        external_locations(tmp_path / "cut.onnx")


async def _embed(bundle: Path) -> tuple[np.ndarray, str]:
    """SENTENCES' vectors from the inference core serving `bundle`'s fp32 graph, and its fingerprint."""
    options = ServingOptions(variant="fp32", intra_op_threads=1)
    async with core(load_bundles([ServedBundle(path=bundle)], options)[0], options) as model:
        return (await embed.embed(model, SENTENCES)).vectors, model.bundle.fingerprint


async def test_the_large_bundle_serves_through_the_core(large_bundle: Path, tiny_bundle: Path) -> None:
    (got, _), (want, _) = await _embed(large_bundle), await _embed(tiny_bundle)
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-5


def _other_weights(bundle: Path, into: Path) -> Path:
    """A copy of `bundle` whose fp32 graphs have the same .onnx but other weights in their data file (as two
    fine-tunes of one architecture can), listed with their new hash."""
    copy = Path(shutil.copytree(bundle, into))
    data = copy / SHARED_DATA
    data.write_bytes((np.frombuffer(data.read_bytes(), np.float32) * np.float32(1.5)).tobytes())
    manifest = json.loads((copy / "manifest.json").read_text())
    for graph in manifest["graphs"]:
        if SHARED_DATA in graph.get("data_files", {}):
            graph["data_files"][SHARED_DATA] = sha256_file(data)
    (copy / "manifest.json").write_text(json.dumps(manifest))
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
