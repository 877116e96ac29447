"""The exported graphs of every family against transformers (and sentence-transformers) itself: each case is
built as a random-weight checkpoint (tests/helpers/families.py, sentence.py), exported once per session
(tests/helpers/exports.py, shared with the serving tests), and onnxruntime's outputs on right-padded,
left-padded and short multilingual batches equal the reference's to max abs 1e-5: token states, attention
maps (banded in ModernBERT's local layers), pooled embeddings, and each head's output (logits, token_logits,
SPLADE's sparse vector).
CamemBERT loads through the same family code and table as XLM-RoBERTa (model/families.py), with the same kind
of tokenizer, so XLM-RoBERTa stands for it here; tests/model/test_families.py checks all seven in PyTorch.

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
from model.heads import sparse_vector
from model.load import load_model
from model.tokenizer import encode, pad_id, pair_ids
from tests.helpers.exports import CASES, Exported, pooled
from tests.helpers.families import padded_batches
from tests.helpers.sentence import PROMPTS, load_reference
from tests.helpers.tokenizers import MULTILINGUAL

TOLERANCE = 1e-5
TASKS = {"ForMaskedLM": "sparse", "ForSequenceClassification": "classify", "ForTokenClassification": "tokens",
         "sentence": "embed"}
ExportOf = Callable[[str], Exported]


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


@pytest.mark.parametrize("case", CASES)
def test_graphs_match_transformers(family_export: ExportOf, case: str) -> None:
    exported = family_export(case)
    tokenizer = load_model(exported.source).tokenizer
    graphs = [(g.kind, g.variant) for g in Manifest.read(exported.bundle).graphs]  # a decoder's fp32-opt too
    for ids, mask in padded_batches(tokenizer):
        reference = expected(exported, ids, mask)
        for kind, variant in graphs:
            got = run(exported.bundle, kind, ids, mask, variant)
            for name, value in got.items():
                if name == "embeddings" and exported.head == "sentence":
                    continue  # after pooling and Dense: test_sentence_embeddings_match
                diff = (compared(name, torch.from_numpy(value), mask) - compared(name, reference[name], mask)).abs()
                assert diff.max() <= TOLERANCE, (kind, variant, name, float(diff.max()))


@pytest.mark.parametrize("case", ["bert-classifier", "mpnet-classifier", "modernbert-classifier", "qwen3-classifier",
                                  "embeddinggemma-scorer"])
def test_the_attention_graph_computes_the_chosen_layers_and_heads(family_export: ExportOf, case: str) -> None:
    """Fed layers and heads (bundle.feeds.selected), the attention graph's maps are the reference's of those layers
    and heads, in the order asked: under a relative bias (MPNet), local and global layers (ModernBERT), shared
    key/value heads and causal sliding layers (Qwen3), Gemma's scale; unfed, every map (the test above)."""
    exported = family_export(case)
    tokenizer = load_model(exported.source).tokenizer
    session = open_session(exported.bundle / "attention-fp32.onnx")
    assert selects(session)
    config = exported.reference.config
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    for ids, mask in padded_batches(tokenizer):
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


@pytest.mark.parametrize("case", CASES)
def test_manifest_says_what_the_bundle_is(family_export: ExportOf, case: str) -> None:
    exported = family_export(case)
    manifest = Manifest.read(exported.bundle)
    family = {"xlm-roberta": "roberta", "embeddinggemma": "gemma3", "nomic_bert": "nomicbert",
              "jina_v3": "jina"}
    assert manifest.architecture == family.get(exported.arch, exported.arch)
    assert manifest.name == case
    assert manifest.task == TASKS[exported.head]
    fast = manifest.graph("fast", "fp32")
    types = ["token_type_ids"] if getattr(exported.reference.config, "type_vocab_size", 0) >= 2 else []
    assert fast is not None and [i.name for i in fast.inputs] == ["input_ids", "attention_mask", *types]
    head_output = {"sparse": ["sparse"], "classify": ["logits"], "tokens": ["token_logits"], "embed": []}
    assert [o.name for o in fast.outputs] == ["embeddings", "token_embeddings", *head_output[manifest.task]]
    if manifest.task == "sparse":
        assert fast.outputs[-1].shape == ["batch", manifest.model_config_["vocab_size"]]
    assert all(value <= TOLERANCE for g in manifest.graphs for key, value in g.parity.items() if key.endswith("diff"))


def test_sentence_embeddings_match_sentence_transformers(family_export: ExportOf) -> None:
    """mpnet under weightedmean pooling, a tanh Dense to 16 and Normalize, with a default prompt: the graph's
    embeddings, L2-normalised, are sentence-transformers' encode() of the prompted texts."""
    bundle, source = family_export("mpnet-sentence").bundle, family_export("mpnet-sentence").source
    manifest = Manifest.read(bundle)
    assert (manifest.prompts, manifest.default_prompt_name) == (PROMPTS, "query")
    assert (manifest.embedding_size, manifest.pooling, manifest.normalize, manifest.max_length) == (16, "weightedmean",
                                                                                                     True, 20)
    texts = [*MULTILINGUAL, " ".join(MULTILINGUAL)]
    tokenizer = load_model(source).tokenizer
    ids, mask = encode(tokenizer, [PROMPTS["query"] + t for t in texts], manifest.max_length)
    (embeddings,) = open_session(bundle / "fast-fp32.onnx").run(
        ["embeddings"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})  # MPNet: no token types
    ours = embeddings / np.linalg.norm(embeddings, axis=-1, keepdims=True)
    theirs = load_reference(source).encode(texts)  # type: ignore[attr-defined]  # the default prompt, normalised
    assert np.abs(ours - theirs).max() <= TOLERANCE


def test_modernbert_graph_attends_locally_in_local_layers(family_export: ExportOf) -> None:
    exported = family_export("modernbert-classifier")
    ids, mask = padded_batches(load_model(exported.source).tokenizer)[0]
    attentions = torch.from_numpy(run(exported.bundle, "attention", ids, mask)["attentions"])  # (B, L, H, T, T)
    pos = torch.arange(ids.size(1))
    beyond = (mask.bool()[:, :, None] & ((pos[:, None] - pos[None, :]).abs() > 2)[None])[:, None]  # (B, 1, T, T)
    for layer in range(attentions.size(1)):  # wide: a global layer every 2, window 4 (two each side)
        outside = attentions[:, layer][beyond.expand_as(attentions[:, layer])]
        assert bool((outside == 0).all()) == (layer % 2 == 1), layer


def test_token_type_input_gives_pairs_their_segments(family_export: ExportOf) -> None:
    """export_graph(token_types=True), as the bundle's fast graph of a BERT cross-encoder has it: it reads (query,
    passage) pairs with type ids 0 / 1, and its logits equal transformers' with the same token_type_ids."""
    exported = family_export("bert-classifier")
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


def test_decoder_sentence_embeddings_match_sentence_transformers(family_export: ExportOf) -> None:
    """Qwen3-Embedding-style: the graph's last-token embeddings, L2-normalised, are sentence-transformers'
    encode(prompt_name="query") of the instruction-prompted texts (right-padded: each text's own last token)."""
    exported = family_export("qwen3-sentence")
    manifest = Manifest.read(exported.bundle)
    assert (manifest.pooling, manifest.normalize, manifest.architecture) == ("lasttoken", True, "qwen3")
    texts = [*MULTILINGUAL, " ".join(MULTILINGUAL)]  # the last is cut at max_seq_length
    ids, mask = encode(load_model(exported.source).tokenizer, [manifest.prompts["query"] + t for t in texts],
                       manifest.max_length)
    (embeddings,) = open_session(exported.bundle / "fast-fp32.onnx").run(
        ["embeddings"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    ours = embeddings / np.linalg.norm(embeddings, axis=-1, keepdims=True)
    theirs = load_reference(exported.source).encode(texts, prompt_name="query")  # type: ignore[attr-defined]
    assert np.abs(ours - theirs).max() <= TOLERANCE
