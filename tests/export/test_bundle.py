"""Manifest contents and round trip, verify_bundle on good and tampered bundles, failed exports."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from bundle.files import sha256_file
from bundle.manifest import Manifest
from bundle.verify import BundleError, verify_bundle
from export import bundle as bundle_mod
from export.bundle import export_bundle
from export.cli import main
from export.parity import ParityError
from export.refusals import ExportError


def test_manifest_round_trip(tiny_bundle: Path) -> None:
    manifest = Manifest.read(tiny_bundle)
    assert Manifest.model_validate_json(manifest.to_json()) == manifest
    assert json.loads(manifest.to_json())["model_config"]["d_model"] == manifest.hidden_size
    assert (manifest.name, manifest.version, manifest.labels) == ("tiny", "7", ["neg", "pos"])
    assert manifest.source.kind == "attnserve" and manifest.max_length == 64
    assert manifest.tokenizer_sha256 == sha256_file(tiny_bundle / "tokenizer.json")
    assert {(g.kind, g.variant) for g in manifest.graphs} == {("fast", "fp32"), ("attention", "fp32")}


def test_manifest_graph_io(tiny_bundle: Path) -> None:
    attention = Manifest.read(tiny_bundle).graph("attention", "fp32")
    assert attention is not None
    assert [i.name for i in attention.inputs] == ["input_ids", "attention_mask", "token_type_ids"]  # BERT's segments
    assert [o.name for o in attention.outputs] == ["embeddings", "token_embeddings", "logits", "attentions"]
    assert attention.outputs[-1].shape == ["batch", "layers", "heads", "sequence", "sequence"]  # those fed (all: 2, 2)
    assert attention.parity["attentions_max_abs_diff"] <= 1e-5


def test_hf_bundle_labels(tiny_hf_bundle: Path) -> None:
    manifest = verify_bundle(tiny_hf_bundle)
    assert manifest.source.kind == "hf-bert" and manifest.labels == ["neg", "pos"]
    assert manifest.pooling == "cls"


def test_verify_passes_and_cli_says_ok(tiny_bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert verify_bundle(tiny_bundle).name == "tiny"
    assert main(["--verify", str(tiny_bundle)]) == 0
    assert "OK" in capsys.readouterr().out


def test_tampered_graph_fails_verify(tiny_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = Path(shutil.copytree(tiny_bundle, tmp_path / "b"))
    graph = copy / "attention-fp32.onnx"
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="attention-fp32.onnx"):
        verify_bundle(copy)
    assert main(["--verify", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "attention-fp32.onnx" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_graph_with_wrong_io_fails_verify(tiny_bundle: Path, tmp_path: Path) -> None:
    """A graph whose hash matches but whose outputs differ from the manifest is caught too."""
    copy = Path(shutil.copytree(tiny_bundle, tmp_path / "b"))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["graphs"][0]["outputs"][0]["name"] = "pooled"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"fast-fp32.onnx: outputs"):
        verify_bundle(copy)


def _perturbing(real_export):  # type: ignore[no-untyped-def]
    """export_graph, then change one weight in the written file: 'weights changed after export'."""
    def export_graph(encoder, kind, path, **kwargs):  # type: ignore[no-untyped-def]
        real_export(encoder, kind, path, **kwargs)
        model, rng = onnx.load(str(path)), np.random.default_rng(0)
        for weight in (w for w in model.graph.initializer if len(w.dims) == 2):
            array = onnx.numpy_helper.to_array(weight)
            noisy = (array + rng.normal(0, 0.05, array.shape)).astype(array.dtype)
            weight.CopyFrom(onnx.numpy_helper.from_array(noisy, weight.name))
        onnx.save(model, str(path))
    return export_graph


def test_broken_graph_fails_gate_and_leaves_no_bundle(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bundle_mod, "export_graph", _perturbing(bundle_mod.export_graph))
    out = tmp_path / "bundles" / "broken"
    with pytest.raises(ParityError, match=r"fast-fp32.onnx \(fp32\) missed its parity gate: \w+_float64_error"):
        export_bundle(tiny_checkpoint, out)
    assert not out.exists()
    assert list(out.parent.iterdir()) == []  # no half-written temporary directory either


def test_unknown_variant_is_a_clear_error(tiny_checkpoint: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ExportError, match="unknown variant"):
        export_bundle(tiny_checkpoint, tmp_path / "b", variants=("fp8",))
    assert main([str(tiny_checkpoint), "--out", str(tmp_path / "b"), "--variants", "fp8"]) == 1
    assert capsys.readouterr().err.startswith("attnserve export: error: unknown variant")


def test_refuses_to_replace_a_non_bundle_directory(tiny_checkpoint: Path) -> None:
    with pytest.raises(ExportError, match="not a bundle"):
        export_bundle(tiny_checkpoint, tiny_checkpoint)


def test_cli_needs_source_and_out(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2 and "--verify" in capsys.readouterr().err


def test_verify_imports_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, bundle.verify; sys.exit('torch' in sys.modules or 'onnx' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_broken_manifest_names_the_field(tiny_bundle: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(tiny_bundle, tmp_path / "b"))
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["graphs"][1]["sha256"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"manifest.json: field graphs.1.sha256"):
        verify_bundle(copy)
    (copy / "manifest.json").write_text("{not json")
    with pytest.raises(BundleError, match="manifest.json: .*Invalid JSON"):
        verify_bundle(copy)


def test_schema_1_to_4_bundles_still_read_and_newer_ones_are_refused(tiny_bundle: Path, tmp_path: Path) -> None:
    """Schema 2 added `measured`, schema 3 the architecture, task, embedding size and prompts, schema 4 the pad id,
    schema 5 the modality, schema 6 the pairs; older manifests still verify, with the values they implied, a schema 4
    one must state its pad id, and an unknown schema does not verify."""
    copy = Path(shutil.copytree(tiny_bundle, tmp_path / "b"))
    manifest = json.loads((copy / "manifest.json").read_text())
    assert manifest["schema_version"] == 6 and "batch_max_abs_diff" in manifest["graphs"][0]["measured"]["cpu"]
    assert manifest["modality"] == "text" and "image" not in manifest
    del manifest["modality"]
    manifest["schema_version"] = 4
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert verify_bundle(copy).modality == "text"
    assert manifest["pad_id"] == manifest["model_config"]["pad_token_id"]
    del manifest["pad_id"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="pad_id"):
        verify_bundle(copy)
    manifest["schema_version"], manifest["model_config"]["pad_token_id"] = 3, 1
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert verify_bundle(copy).pad_id == 1  # what the service padded with before schema 4: the config's
    manifest["model_config"]["pad_token_id"] = 0
    for field in ("architecture", "task", "embedding_size", "prompts", "default_prompt_name"):
        del manifest[field]
    manifest["schema_version"] = 2
    (copy / "manifest.json").write_text(json.dumps(manifest))
    read = verify_bundle(copy)
    assert (read.architecture, read.task, read.embedding_size, read.prompts) == ("bert", "classify", 32, {})
    manifest["schema_version"] = 1
    for graph in manifest["graphs"]:
        del graph["measured"]
    (copy / "manifest.json").write_text(json.dumps({**manifest, "labels": []}))
    read = verify_bundle(copy)
    assert all(not g.measured for g in read.graphs) and read.task == "embed"
    manifest["schema_version"] = 7
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="schema_version 7 is not supported"):
        verify_bundle(copy)


def test_the_cli_export_prints_its_own_lines_only(cli_bundle: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """`attnserve export` as a user runs it (tests/fixtures.py): its log lines, none of torch.onnx's warnings about
    torchvision (which a text model never needs, and a plain install lacks)."""
    _, done = cli_bundle
    assert done.returncode == 0, done.stderr[-2000:]
    assert "bundle written to" in done.stderr and "torchvision" not in done.stderr + done.stdout, done.stderr
