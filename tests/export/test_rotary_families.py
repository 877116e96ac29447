"""GTE's dynamic rope scaling exported and checked against transformers itself, beside the other families' cases in
tests/export/test_families.py (NomicBERT, GTE with its checkpoints' linear scaling and jina-embeddings-v3 are
exported there, fp32 and fp32-opt, and served over HTTP in tests/service/test_families.py). Each case
(tests/helpers/rotary.py) is exported once per module with export.bundle.export_bundle and `attnserve export`'s
default variants (fp32, and fp32-opt, onnxruntime's fused graph; it raises unless every graph passes its parity
gate), and onnxruntime's outputs of every graph on padded batches equal transformers' to max abs 1e-5: token
states, attention maps and the CLS embedding, at both shapes: the graph computes the grown rotary base from each
input's length (24 and 320 tokens, past its original 16 and 128 positions, and 6, under them), so the growth is in
the graph, not baked in at the example's length.

Shape letters: B batch, T sequence, L layers, H heads, D hidden, C classes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bundle.manifest import Manifest
from export.variants import DEFAULT_VARIANTS
from model.load import load_model
from tests.export.test_families import compared, run
from tests.helpers.rotary import batches, save_rotary

TOLERANCE = 1e-5
CASES = {  # name: (architecture, head class, shape); the three families' classifiers (GTE's linear scaling) are
    # exported with the other families' in tests/export/test_families.py (fp32 and fp32-opt) and served over HTTP
    "gte-dynamic": ("gte-dynamic", "Model", "tiny"),
    "gte-dynamic-realistic": ("gte-dynamic", "Model", "realistic"),
}
FAMILY = {"nomic_bert": "nomicbert", "gte": "gte", "gte-dynamic": "gte", "jina_v3": "jina"}


@pytest.fixture(scope="module", params=list(CASES))
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path,
                                                                                                   torch.nn.Module]:
    """(case name, source directory, bundle directory, transformers' reference)."""
    from export.bundle import export_bundle

    arch, head, shape = CASES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    reference = save_rotary(root / "source", arch, head, shape)
    export_bundle(root / "source", root / "bundle", variants=DEFAULT_VARIANTS, name=request.param)
    return request.param, root / "source", root / "bundle", reference


def expected(reference: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """transformers' outputs under the graphs' output names (embeddings: the first real token's state, the loader's
    pooling for a checkpoint without sentence-transformers modules)."""
    with torch.no_grad():
        body = reference.base_model(input_ids=ids, attention_mask=mask, output_attentions=True)
        states = body.last_hidden_state  # (B, T, D)
        first = torch.where(mask.bool(), torch.arange(mask.size(1)), mask.size(1)).amin(1)  # (B,)
        out = {"token_embeddings": states, "attentions": torch.stack(body.attentions, dim=1),  # (B, L, H, T, T)
               "embeddings": states[torch.arange(len(states)), first]}  # (B, D)
        if hasattr(reference, "classifier"):
            out["logits"] = reference(input_ids=ids, attention_mask=mask).logits  # (B, C)
    return out


def test_graphs_match_transformers(exported: tuple[str, Path, Path, torch.nn.Module]) -> None:
    name, source, bundle, reference = exported
    shape = CASES[name][2]
    tokenizer = load_model(source).tokenizer
    graphs = [(g.kind, g.variant) for g in Manifest.read(bundle).graphs]
    assert sorted(graphs) == [("attention", "fp32"), ("fast", "fp32"), ("fast", "fp32-opt")]
    for ids, mask in batches(tokenizer, shape):
        want = expected(reference, ids, mask)
        for kind, variant in graphs:
            got = run(bundle, kind, ids, mask, variant)
            assert set(got) == set(want) - ({"attentions"} if kind == "fast" else set())
            for output, value in got.items():
                diff = (compared(output, torch.from_numpy(value), mask) - compared(output, want[output], mask)).abs()
                assert diff.max() <= TOLERANCE, (kind, output, tuple(ids.shape), float(diff.max()))


def test_manifest_says_what_the_bundle_is(exported: tuple[str, Path, Path, torch.nn.Module]) -> None:
    name, _, bundle, reference = exported
    manifest = Manifest.read(bundle)
    config = manifest.model_config_
    assert manifest.name == name and manifest.architecture == FAMILY[CASES[name][0]]
    assert manifest.task == ("classify" if CASES[name][1] == "ForSequenceClassification" else "embed")
    assert (config["rotary_scaling"], config["position_embedding"]) == (
        reference.config.rope_parameters["rope_type"], "none")
    fast = manifest.graph("fast", "fp32")
    types = ["token_type_ids"] if reference.config.type_vocab_size >= 2 else []  # NomicBERT's two segments
    assert fast is not None and [i.name for i in fast.inputs] == ["input_ids", "attention_mask", *types]
    assert all(value <= TOLERANCE for g in manifest.graphs for key, value in g.parity.items() if key.endswith("diff"))
