"""`attnserve export --adapter NAME=DIR` and export_bundle(adapters=...) against transformers + PEFT 0.21.

A random BertModel and two PEFT LoRA adapters of different ranks and targets (tests/model/test_lora.py's), exported
into one bundle: onnxruntime's outputs with adapter index k equal PeftModel's with that adapter active (hidden
states on real tokens, the pooled vector, the attention maps: max abs 1e-5), also with the base and both adapters
mixed in one batch. A classifier base exported through the CLI maps PEFT's names under its head class's prefix
(bert.encoder...). What is refused is refused with a message that says what and why; a bundle without adapters
is what it was; N adapters grow the graph by their own bytes, not by copies of the base.

Shape letters: B batch, T sequence, L layers, H heads.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
import transformers

from bundle.feeds import ADAPTER, pad
from bundle.manifest import Manifest
from bundle.session import open_session
from bundle.verify import BundleError, verify_bundle
from export.bundle import export_bundle
from export.cli import main as export_main
from export.graphs import export_graph
from export.refusals import ExportError
from model.adapters import adapted_encoder
from model.load import load_model
from model.peft import AdapterError, read_adapter
from tests.helpers.adapters import peft_reference, run_reference, save_adapter
from tests.helpers.families import save_hf
from tests.model.test_lora import BERT_ADAPTERS, batch, bert_loader, save_bert

TOLERANCE = 1e-5


def onnx_outputs(bundle: Path, graph: str, ids: torch.Tensor, mask: torch.Tensor, adapters: list[int]) -> dict:
    session = open_session(bundle / graph)
    names = [i.name for i in session.get_inputs()]
    feeds = pad([row[: int(n)] for row, n in zip(ids.numpy(), mask.sum(1), strict=True)], 0, names,
                adapters=adapters)
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))


def assert_equals_reference(got: dict, theirs: object, mask: torch.Tensor, rows: list[int]) -> None:
    real = mask.bool().numpy()
    states = theirs.last_hidden_state.numpy()  # type: ignore[attr-defined]
    assert np.abs(got["token_embeddings"][rows][real] - states[real]).max() <= TOLERANCE
    assert np.abs(got["embeddings"][rows] - states[:, 0]).max() <= TOLERANCE  # BertModel: [CLS] pooling
    if "attentions" in got:
        maps = torch.stack(theirs.attentions, dim=1).numpy()  # type: ignore[attr-defined]  # (B, L, H, T, T)
        query_rows = np.broadcast_to(real[:, None, None, :], maps.shape[:-1])  # (B, L, H, T)
        assert np.abs(got["attentions"][rows][query_rows] - maps[query_rows]).max() <= TOLERANCE


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("adapters")
    save_bert(root / "base", "tiny")
    adapters = {name: save_adapter(root / "base", root / name, bert_loader, seed=seed, **lora)
                for seed, (name, lora) in enumerate(BERT_ADAPTERS.items(), start=1)}
    export_bundle(root / "base", root / "bundle", adapters=adapters)
    return root / "base", root / "bundle", adapters


def test_the_manifest_lists_the_adapters_and_every_graph_takes_their_index(
        exported: tuple[Path, Path, dict[str, Path]]) -> None:
    _, bundle, adapters = exported
    manifest = verify_bundle(bundle)
    assert [a.name for a in manifest.adapters] == list(adapters) == manifest.model_config_["adapters"]
    first, second = manifest.adapters
    assert (first.rank, first.alpha, first.scaling) == (4, 8.0, 2.0)
    assert (second.rank, second.use_rslora, second.scaling) == (8, True, pytest.approx(16 / 8 ** 0.5))
    assert first.targets == ["attention.k_proj", "attention.out_proj", "attention.q_proj", "attention.v_proj"]
    assert second.targets == ["attention.out_proj", "ffn.down", "ffn.up"]  # PEFT matches output.dense by suffix
    assert first.bytes > 0 and first.source is not None
    assert manifest.adapter_index(None) == 0 and manifest.adapter_index("mlp") == 2
    for graph in manifest.graphs:
        assert [(i.name, i.shape) for i in graph.inputs][-1] == (ADAPTER, ["batch"])
        assert any(key.startswith("adapter:mlp_") for key in graph.parity) and "mixed_embeddings_max_abs_diff" in \
            graph.parity


@pytest.mark.parametrize("graph", ["fast-fp32.onnx", "fast-fp32-opt.onnx", "attention-fp32.onnx"])
def test_each_adapter_and_a_mixed_batch_equal_peft(exported: tuple[Path, Path, dict[str, Path]], graph: str) -> None:
    base, bundle, adapters = exported
    reference = peft_reference(base, bert_loader, adapters)
    ids, mask = batch(reference.config.vocab_size, 24)
    names = [None, *adapters]
    for index, name in enumerate(names):
        got = onnx_outputs(bundle, graph, ids, mask, [index] * 3)
        assert_equals_reference(got, run_reference(reference, name, input_ids=ids, attention_mask=mask,
                                                   output_attentions=True), mask, slice(None))  # type: ignore[arg-type]
    mixed = [2, 0, 1]
    got = onnx_outputs(bundle, graph, ids, mask, mixed)
    for row, index in enumerate(mixed):
        alone = run_reference(reference, names[index], input_ids=ids[row:row + 1], attention_mask=mask[row:row + 1],
                              output_attentions=True)
        assert_equals_reference(got, alone, mask[row:row + 1], [row])


def test_the_cli_exports_a_classifier_with_adapters(tmp_path: Path) -> None:
    """PEFT over BertForSequenceClassification names the body bert.encoder...: the family's head prefix maps it."""
    save_hf(tmp_path / "base", "bert", "ForSequenceClassification", "small")

    def loader(path: Path) -> torch.nn.Module:
        return transformers.BertForSequenceClassification.from_pretrained(path, attn_implementation="eager")

    adapter = save_adapter(tmp_path / "base", tmp_path / "qv", loader, r=4, target_modules=["query", "value"])
    keys = json.loads((adapter / "adapter_config.json").read_text())
    assert keys["modules_to_save"] is None
    code = export_main([str(tmp_path / "base"), "--out", str(tmp_path / "bundle"), "--variants", "fp32",
                        "--adapter", f"qv={adapter}", "-q"])
    assert code == 0
    reference = peft_reference(tmp_path / "base", loader, {"qv": adapter})
    ids, mask = batch(reference.config.vocab_size, 16)
    for index, name in enumerate([None, "qv"]):
        got = onnx_outputs(tmp_path / "bundle", "fast-fp32.onnx", ids, mask, [index] * 3)
        logits = run_reference(reference, name, input_ids=ids, attention_mask=mask).logits.numpy()
        assert np.abs(got["logits"] - logits).max() <= TOLERANCE


def test_a_bundle_without_adapters_is_unchanged(tiny_hf_bundle: Path) -> None:
    """A transformers BERT exported fp32 without --adapter (tests/fixtures.py): no adapter input, no adapters key."""
    manifest = Manifest.read(tiny_hf_bundle)
    assert [i.name for i in manifest.graphs[0].inputs] == ["input_ids", "attention_mask", "token_type_ids"]
    assert "adapters" not in json.loads((tiny_hf_bundle / "manifest.json").read_text())
    assert manifest.adapters == []


def test_verify_refuses_adapters_the_graphs_do_not_take(exported: tuple[Path, Path, dict[str, Path]],
                                                        tmp_path: Path) -> None:
    _, bundle, _ = exported
    data = json.loads((bundle / "manifest.json").read_text())
    data["graphs"][0]["inputs"] = data["graphs"][0]["inputs"][:-1]
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    for file in bundle.iterdir():
        if file.name != "manifest.json":
            shutil.copyfile(file, tmp_path / file.name)
    with pytest.raises(BundleError, match="lacks the 'adapter' input, but the bundle has 2 adapters"):
        verify_bundle(tmp_path)
    data["adapters"] = data["adapters"][:1]
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match=r"adapters \['attention'\] differ from the model config's"):
        verify_bundle(tmp_path)


REFUSALS = {
    "position": (dict(target_modules=["position_embeddings", "query"]),
                 r"targets embeddings.position_embeddings \(embeddings.position here\), which is not supported: LoRA "
                 r"on the position embeddings is not served \(only the token embeddings take an embedding LoRA\); "
                 r"adapters are accepted on the token embeddings and the attention and MLP projections only: "
                 r"embeddings.word_embeddings, attention.self.query, attention.self.key"),
    "dora": (dict(target_modules=["query"], use_dora=True), "DoRA \\(use_dora\\) is not supported"),
    "modules_to_save": (dict(target_modules=["query"], modules_to_save=["pooler"]),
                        "modules_to_save .* is not supported"),
    "bias": (dict(target_modules=["query"], bias="all"), "bias 'all' is not supported"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_what_is_not_plain_lora_is_refused(exported: tuple[Path, Path, dict[str, Path]], tmp_path: Path,
                                           case: str) -> None:
    base, _, _ = exported
    lora, message = REFUSALS[case]
    adapter = save_adapter(base, tmp_path / case, bert_loader, r=4, **lora)
    with pytest.raises(AdapterError, match=message):
        export_bundle(base, tmp_path / "bundle", ["fp32"], adapters={case: adapter})
    assert not (tmp_path / "bundle").exists()


def test_an_adapter_of_another_base_is_refused(exported: tuple[Path, Path, dict[str, Path]], tmp_path: Path) -> None:
    base, _, _ = exported
    save_hf(tmp_path / "wide", "bert", "Model", "wide")  # 48 wide, 3 layers
    wide = save_adapter(tmp_path / "wide", tmp_path / "wide-lora", bert_loader, r=4, target_modules=["query"])
    with pytest.raises(AdapterError, match="encoder.layer.2.attention.self.query, which is not a module of this "
                                           r"bert base \(an adapter for another base\?\)"):
        export_bundle(base, tmp_path / "bundle", ["fp32"], adapters={"wide": wide})
    shallow = save_adapter(tmp_path / "wide", tmp_path / "shallow", bert_loader, r=4, target_modules=["query"],
                           layers_to_transform=[0], layers_pattern="layer")
    with pytest.raises(ValueError, match=r"does not fit a \(32, 32\) projection \(another base\?\)"):
        export_bundle(base, tmp_path / "bundle", ["fp32"], adapters={"shallow": shallow})


def test_a_module_the_export_drops_is_refused(exported: tuple[Path, Path, dict[str, Path]], tmp_path: Path) -> None:
    base, _, _ = exported
    pooler = save_adapter(base, tmp_path / "pooler", bert_loader, r=4, target_modules=["dense"])
    with pytest.raises(AdapterError, match="targets pooler.dense, which is not supported"):
        export_bundle(base, tmp_path / "bundle", ["fp32"], adapters={"pooler": pooler})


def test_names_and_directories_are_checked(exported: tuple[Path, Path, dict[str, Path]], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    base, _, adapters = exported
    (tmp_path / "empty").mkdir()
    with pytest.raises(AdapterError, match="is not a PEFT LoRA adapter directory: adapter_config.json is missing"):
        export_bundle(base, tmp_path / "bundle", ["fp32"], adapters={"empty": tmp_path / "empty"})
    with pytest.raises(AdapterError, match="adapter name 'base' is not allowed"):
        export_bundle(base, tmp_path / "bundle", ["fp32"], adapters={"base": adapters["mlp"]})
    with pytest.raises(ExportError, match="int8 are not built with adapters"):
        export_bundle(base, tmp_path / "bundle", ["fp32", "int8"], adapters={"mlp": adapters["mlp"]})
    code = export_main([str(base), "--out", str(tmp_path / "bundle"), "--adapter", f"a={adapters['mlp']}",
                        "--adapter", f"a={adapters['attention']}"])
    assert code == 1 and "--adapter a is given twice" in capsys.readouterr().err


@pytest.mark.heavy  # two 4-layer exports, about 30 s: make reliability (the adapters' graphs keep their tests here)
def test_adapters_grow_the_graph_by_their_own_bytes(tmp_path: Path) -> None:
    """Two rank-8 adapters on every projection of a 4-layer, 128-wide BERT: the fast graph's weights grow by the
    stacked adapters (N + 1 rows, the base's row of zeros included), a fraction of the base's; the file by that and
    the exporter's per-node metadata (a stack trace on each of the few added nodes, which at this toy size is as
    large as the adapters; bench.adapters measures a BERT-base, docs/export.md)."""
    save_bert(tmp_path / "base", "realistic")
    lora = dict(r=8, target_modules=r".*encoder.*\.(query|key|value|dense)")
    adapters = {f"a{i}": read_adapter(f"a{i}", save_adapter(tmp_path / "base", tmp_path / f"a{i}", bert_loader,
                                                            seed=i, **lora), tmp_path / "base") for i in range(2)}
    base = load_model(tmp_path / "base").encoder
    export_graph(base, "fast", tmp_path / "plain.onnx")
    export_graph(adapted_encoder(base, {n: a.pairs for n, a in adapters.items()}), "fast", tmp_path / "adapted.onnx")
    plain, adapted = (graph_sizes(tmp_path / f"{name}.onnx") for name in ("plain", "adapted"))
    stacked = sum(a.bytes for a in adapters.values()) * 3 // 2  # (N + 1) / N of their own bytes: index 0's zeros
    assert stacked <= adapted["weights"] - plain["weights"] <= stacked + 16 * 1024
    assert adapted["weights"] - plain["weights"] < plain["weights"] / 2  # two copies of the base would be 2 x
    other = adapted["file"] - plain["file"] - (adapted["metadata"] - plain["metadata"])
    assert stacked <= other <= stacked + 64 * 1024


def graph_sizes(path: Path) -> dict[str, int]:
    """Bytes of the file, of its initializers (the weights onnxruntime holds) and of its nodes' metadata."""
    graph = onnx.load(str(path)).graph
    return {"file": path.stat().st_size, "weights": sum(len(i.SerializeToString()) for i in graph.initializer),
            "metadata": sum(len(p.SerializeToString()) + 2 for n in graph.node for p in n.metadata_props)}
