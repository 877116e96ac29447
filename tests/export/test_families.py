"""The exported graphs of every family against transformers (and sentence-transformers) itself: each kind of check
is one test over the export rows of the family table (tests/helpers/family_cases.py EXPORTS). Each case is a
random-weight checkpoint (tests/helpers/families.py, rotary.py, decoders.py, sentence.py) exported once per session
(tests/helpers/exports.py, shared with the serving tests; the table's own rows, e.g. GTE's dynamic rope scaling at
two shapes, with `attnserve export`'s default variants, fp32 and fp32-opt), and onnxruntime's outputs on
right-padded, left-padded and short multilingual batches (a few hundred tokens at the realistic shape) equal the
reference's to max abs 1e-5: token states, attention maps (banded in ModernBERT's local layers and the decoders'
sliding ones), pooled embeddings, and each head's output (logits, token_logits, SPLADE's sparse vector).
CamemBERT loads through the same family code and table as XLM-RoBERTa (model/families/encoders.py), with the same
kind of tokenizer, so XLM-RoBERTa stands for it here; tests/model/test_families.py checks all seven in PyTorch.

Shape letters: B batch, T sequence, L layers, H heads, C classes, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from bundle.feeds import input_names, pad, selected, selects
from bundle.manifest import Manifest
from bundle.session import open_session
from bundle.variants import DEFAULT_VARIANTS
from export import variants
from model.heads import sparse_vector
from model.load import load_model
from model.tokenizer import encode, pad_id, pair_ids
from tests.helpers.exports import Exported, asked_variants, pooled
from tests.helpers.families import padded_batches
from tests.helpers.family_cases import CASE, EXPORTS, HEAVY_EXPORTS, Export
from tests.helpers.family_checks import TOLERANCE, assert_masks_hold, inputs
from tests.helpers.rotary import save_rotary
from tests.helpers.sentence import load_reference
from tests.helpers.tokenizers import MULTILINGUAL

TASKS = {"ForMaskedLM": "sparse", "ForSequenceClassification": "classify", "ForTokenClassification": "tokens",
         "sentence": "embed", "Model": "embed"}
ExportOf = Callable[[str], Exported]


def rows(**quirk: bool) -> list[object]:
    """The export rows (with the quirk, if one is named), each with its name as the test id."""
    return [pytest.param(e, id=e.name, marks=[pytest.mark.heavy] if e.name in HEAVY_EXPORTS else [])
            for e in EXPORTS if all(bool(getattr(e, k)) == v for k, v in quirk.items())]


@pytest.fixture(scope="session")
def own_export(tmp_path_factory: pytest.TempPathFactory) -> ExportOf:
    """The table's own rows, each saved and exported (default variants) on first use."""
    from export.bundle import export_bundle

    made: dict[str, Exported] = {}

    def get(name: str) -> Exported:
        if name not in made:
            row = next(e for e in EXPORTS if e.name == name)
            root = tmp_path_factory.mktemp(name)
            reference = CASE[row.arch].save(root / "source", row.arch, row.head, row.shape)
            export_bundle(root / "source", root / "bundle", variants=DEFAULT_VARIANTS, name=name)
            made[name] = Exported(row.arch, row.head, root / "source", root / "bundle", reference)
        return made[name]
    return get


@pytest.fixture
def exported_of(family_export: ExportOf, own_export: ExportOf) -> Callable[[Export], Exported]:
    return lambda row: own_export(row.name) if row.own else family_export(row.name)


def run(bundle: Path, kind: str, ids: torch.Tensor, mask: torch.Tensor, variant: str = "fp32") -> dict[str, np.ndarray]:
    session = open_session(bundle / f"{kind}-{variant}.onnx")
    names = [o.name for o in session.get_outputs()]
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    if "token_type_ids" in input_names(session):  # BERT's two segments: a lone text is all segment A
        feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
    return dict(zip(names, session.run(names, feeds), strict=True))


def expected(case: Exported, ids: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """transformers' outputs under the graph's output names (embeddings: the first real token's state, or a
    decoder's last, the loader's pooling for a checkpoint without sentence-transformers modules)."""
    with torch.no_grad():
        body = case.reference.base_model(input_ids=ids, attention_mask=mask, output_attentions=True)
        states = body.last_hidden_state  # (B, T, D)
        out = {"token_embeddings": states, "attentions": torch.stack(body.attentions, dim=1),  # (B, L, H, T, T)
               "embeddings": pooled(states, mask, case.arch)}  # (B, D)
        if case.head != "sentence" and case.head != "Model":
            logits = case.reference(input_ids=ids, attention_mask=mask).logits
            name = {"sparse": "sparse", "classify": "logits", "tokens": "token_logits"}[TASKS[case.head]]
            out[name] = sparse_vector(logits, mask) if name == "sparse" else logits
    return out


def compared(name: str, value: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """What real tokens determine: token outputs at real tokens, attention rows of real queries, else all."""
    real = mask.bool()
    if name in ("token_embeddings", "token_logits"):
        return value[real]
    if name == "attentions":
        return value[real[:, None, None, :].expand(value.shape[:-1])]  # (N, T) rows of real queries
    return value


@pytest.mark.parametrize("row", rows())
def test_graphs_match_transformers(exported_of: Callable[[Export], Exported], row: Export) -> None:
    """Every graph of the bundle (a decoder's and a rotary encoder's fp32-opt too); a row that names its graphs
    has exactly those, each with exactly the outputs it should have (the fast graph: no maps)."""
    exported = exported_of(row)
    tokenizer = load_model(exported.source).tokenizer
    graphs = [(g.kind, g.variant) for g in Manifest.read(exported.bundle).graphs]
    if row.graphs:
        assert sorted(graphs) == sorted(row.graphs)
    for ids, mask in inputs(tokenizer, row.shape):
        reference = expected(exported, ids, mask)
        for kind, variant in graphs:
            got = run(exported.bundle, kind, ids, mask, variant)
            if row.graphs:
                assert set(got) == set(reference) - ({"attentions"} if kind == "fast" else set())
            for name, value in got.items():
                if name == "embeddings" and exported.head == "sentence":
                    continue  # after pooling and Dense: test_sentence_embeddings_match_sentence_transformers
                diff = (compared(name, torch.from_numpy(value), mask) - compared(name, reference[name], mask)).abs()
                assert diff.max() <= TOLERANCE, (kind, variant, name, tuple(ids.shape), float(diff.max()))


@pytest.mark.parametrize("row", rows())
def test_fp32_opt_is_left_out_only_where_the_optimiser_fuses_nothing_but_norms(
        exported_of: Callable[[Export], Exported], row: Export, tmp_path: Path) -> None:
    """Where the bundle has no fp32-opt (export.variants.fuses_only_norms said so, and the optimiser never ran), the
    optimiser, run now, fuses only norms: the check before it leaves out nothing it would have sped up."""
    exported = exported_of(row)
    graphs = {(g.kind, g.variant) for g in Manifest.read(exported.bundle).graphs}
    if ("fast", "fp32-opt") in graphs or "fp32-opt" not in (DEFAULT_VARIANTS if row.own else asked_variants(row.arch)):
        return  # optimised and kept (the optimiser fused more than norms), or not asked for
    config = load_model(exported.source).encoder.config
    fused = variants.optimize(exported.bundle / "fast-fp32.onnx", tmp_path / "opt.onnx", config)
    assert {op for op, n in fused.items() if n} <= set(variants.NORM_OPS), fused


@pytest.mark.parametrize("row", rows(selects=True))
def test_the_attention_graph_computes_the_chosen_layers_and_heads(exported_of: Callable[[Export], Exported],
                                                                  row: Export) -> None:
    """Fed layers and heads (bundle.feeds.selected), the attention graph's maps are the reference's of those layers
    and heads, in the order asked: under a relative bias (MPNet), local and global layers (ModernBERT), shared
    key/value heads and causal sliding layers (Qwen3), Gemma's scale; unfed, every map (the test above)."""
    exported = exported_of(row)
    tokenizer = load_model(exported.source).tokenizer
    session = open_session(exported.bundle / "attention-fp32.onnx")
    assert selects(session)
    config = exported.reference.config
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    for ids, mask in inputs(tokenizer, row.shape):
        reference = expected(exported, ids, mask)["attentions"]  # (B, L, H, T, T)
        feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
        if "token_type_ids" in input_names(session):
            feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
        for chosen_layers, chosen_heads in (([layers - 1, 0], [heads - 1, 0]), ([1], [heads // 2])):
            maps, = session.run(["attentions"], feeds | selected(chosen_layers, chosen_heads))  # (B, l, h, T, T)
            want = reference[:, chosen_layers][:, :, chosen_heads]
            assert maps.shape == tuple(want.shape)
            diff = (compared("attentions", torch.from_numpy(maps), mask) - compared("attentions", want, mask)).abs()
            assert diff.max() <= TOLERANCE, (chosen_layers, chosen_heads, float(diff.max()))


@pytest.mark.parametrize("row", rows())
def test_manifest_says_what_the_bundle_is(exported_of: Callable[[Export], Exported], row: Export) -> None:
    exported = exported_of(row)
    manifest = Manifest.read(exported.bundle)
    assert manifest.architecture == row.family  # the registry's family name
    assert manifest.name == row.name
    assert manifest.task == TASKS[exported.head]
    if CASE[row.arch].save is save_rotary:  # the rotary scaling the checkpoint asks for, no learned positions
        config = manifest.model_config_
        assert (config["rotary_scaling"], config["position_embedding"]) == (
            exported.reference.config.rope_parameters["rope_type"], "none")
    fast = manifest.graph("fast", "fp32")
    types = ["token_type_ids"] if getattr(exported.reference.config, "type_vocab_size", 0) >= 2 else []
    assert fast is not None and [i.name for i in fast.inputs] == ["input_ids", "attention_mask", *types]
    head_output = {"sparse": ["sparse"], "classify": ["logits"], "tokens": ["token_logits"], "embed": []}
    assert [o.name for o in fast.outputs] == ["embeddings", "token_embeddings", *head_output[manifest.task]]
    if manifest.task == "sparse":
        assert fast.outputs[-1].shape == ["batch", manifest.model_config_["vocab_size"]]
    assert all(value <= TOLERANCE for g in manifest.graphs for key, value in g.parity.items() if key.endswith("diff"))


@pytest.mark.parametrize("row", rows(sentence=True))
def test_sentence_embeddings_match_sentence_transformers(exported_of: Callable[[Export], Exported],
                                                         row: Export) -> None:
    """mpnet under weightedmean pooling, a tanh Dense to 16 and Normalize, with a default prompt; Qwen3-Embedding's
    last-token pooling and Normalize with its instruction prompt: the graph's embeddings, L2-normalised, are
    sentence-transformers' encode() of the prompted texts (right-padded: a decoder's own last token)."""
    assert row.sentence is not None
    exported = exported_of(row)
    manifest = Manifest.read(exported.bundle)
    assert {key: getattr(manifest, key) for key in row.sentence.manifest} == row.sentence.manifest
    texts = [*MULTILINGUAL, " ".join(MULTILINGUAL)]  # the last is cut at max_seq_length
    prompt = manifest.prompts[row.sentence.prompt_name or manifest.default_prompt_name]
    ids, mask = encode(load_model(exported.source).tokenizer, [prompt + t for t in texts], manifest.max_length)
    (embeddings,) = open_session(exported.bundle / "fast-fp32.onnx").run(
        ["embeddings"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})  # no token types
    ours = embeddings / np.linalg.norm(embeddings, axis=-1, keepdims=True)
    reference = load_reference(exported.source)
    theirs = (reference.encode(texts) if row.sentence.prompt_name is None  # type: ignore[attr-defined]
              else reference.encode(texts, prompt_name=row.sentence.prompt_name))  # type: ignore[attr-defined]
    assert np.abs(ours - theirs).max() <= TOLERANCE


@pytest.mark.parametrize("row", rows(masks=True))
def test_the_attention_graph_shows_each_layers_mask(exported_of: Callable[[Export], Exported], row: Export) -> None:
    """The graph's maps of real queries: no later key under a causal mask, none beyond the window in the local
    layers (ModernBERT's, the decoders' sliding ones), as the row's case says for PyTorch."""
    assert row.masks is not None
    exported = exported_of(row)
    loaded = load_model(exported.source)
    for ids, mask in padded_batches(loaded.tokenizer):
        attentions = torch.from_numpy(run(exported.bundle, "attention", ids, mask)["attentions"])  # (B, L, H, T, T)
        assert_masks_hold(attentions, mask, loaded.encoder.config.window_size, row.masks.local_layers,
                          row.masks.causal)


@pytest.mark.parametrize("row", rows(token_types=True))
def test_token_type_input_gives_pairs_their_segments(exported_of: Callable[[Export], Exported], row: Export) -> None:
    """export_graph(token_types=True), as the bundle's fast graph of a BERT cross-encoder has it: it reads (query,
    passage) pairs with type ids 0 / 1, and its logits equal transformers' with the same token_type_ids."""
    exported = exported_of(row)
    loaded = load_model(exported.source)
    session = open_session(exported.bundle / "fast-fp32.onnx")
    names = [i.name for i in session.get_inputs()]
    assert names == ["input_ids", "attention_mask", "token_type_ids"]
    ids, types = pair_ids(loaded.tokenizer, list(zip(MULTILINGUAL, MULTILINGUAL[::-1], strict=True)), 32)
    feeds = pad(ids, pad_id(loaded.tokenizer), names, type_ids=types)
    assert feeds["token_type_ids"].any()
    (logits,) = session.run(["logits"], feeds)
    with torch.no_grad():
        expected_logits = exported.reference(**{k: torch.from_numpy(v) for k, v in feeds.items()}).logits.numpy()
    assert np.abs(logits - expected_logits).max() <= TOLERANCE
