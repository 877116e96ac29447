"""ColBERT bundles (PyLate folders and colbert-ai checkpoints exported fp32 by export.bundle.export_bundle) served
torch-free: the bundle's tokenizer.json and manifest multi_vector spec feed the fast graph
(inference/tasks/multi_vector_feeds.py)
and onnxruntime's multi_vectors, post-processed by inference/tasks/multi_vector_scores.py, equal PyLate and colbert-ai
(tests/helpers/colbert.py) on every query token vector (expansion [MASK]s included), every document token vector
the skip-list leaves, and MaxSim, to 1e-5: both layouts at the tiny shape, the PyLate layout at the realistic one
(the layouts differ in the loader and the spec, which the tiny shape covers; an export takes ~10 s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import Tokenizer

from bundle.feeds import input_names
from bundle.manifest import Manifest
from bundle.session import open_session
from export.bundle import export_bundle
from inference.tasks import multi_vector_feeds as feeds
from inference.tasks.multi_vector_scores import maxsim
from tests.helpers import colbert as ref

TOLERANCE = 1e-5
LAYOUTS = {"tiny": ("pylate", "colbert_ai"), "realistic": ("pylate",)}  # the layouts exported at each shape


@pytest.fixture(scope="module", params=["tiny", "realistic"])
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if request.param == "tiny":  # the session's tiny case (tests/fixtures.py), served by other tests too
        return request.getfixturevalue("colbert_tiny")  # type: ignore[no-any-return]
    root = tmp_path_factory.mktemp(f"colbert-export-{request.param}")
    built = ref.build_case(root, request.param)
    for layout in LAYOUTS[request.param]:
        built[f"{layout}_bundle"] = root / f"bundle-{layout}"
        export_bundle(built[f"{layout}_dir"], built[f"{layout}_bundle"], variants=("fp32",), name=layout)
    return built


def served(bundle: Path, expand: bool = True) -> dict[str, Any]:
    """Vectors and scores from the bundle alone: its manifest's spec, its tokenizer.json, its fast fp32 graph."""
    manifest = Manifest.read(bundle)
    spec = manifest.multi_vector
    assert spec is not None
    if not expand:
        spec = spec.model_copy(update={"query_length": 0})
    tokenizer = Tokenizer.from_file(str(bundle / manifest.tokenizer))
    session = open_session(bundle / "fast-fp32.onnx")
    feeder = feeds.ColbertFeeder(tokenizer, spec, manifest.max_length, manifest.pad_id)
    out: dict[str, Any] = {}
    for kind, make, texts in (("queries", feeder.queries, ref.QUERIES), ("documents", feeder.documents, ref.DOCUMENTS)):
        feed = make(texts)
        inputs = {"input_ids": feed.input_ids, "attention_mask": feed.attention_mask}
        if "token_type_ids" in input_names(session):
            inputs["token_type_ids"] = np.zeros_like(feed.input_ids)
        (multi_vectors,) = session.run(["multi_vectors"], inputs)  # (B, T, M)
        out[kind] = feeds.token_vectors(multi_vectors, feed, spec)
    out["scores"] = np.array([[maxsim(q, d, spec.reduction) for d in out["documents"]] for q in out["queries"]])
    return out


def test_the_graph_equals_the_reference(case: dict[str, Any]) -> None:
    for layout in LAYOUTS[case["shape"]]:
        got, want = served(case[f"{layout}_bundle"]), case[layout]
        ref.assert_equal_vectors(got["queries"], want["queries"], TOLERANCE)
        ref.assert_equal_vectors(got["documents"], want["documents"], TOLERANCE)
        np.testing.assert_allclose(got["scores"], want["scores"], rtol=0, atol=TOLERANCE)


def test_the_manifest_carries_the_spec(case: dict[str, Any]) -> None:
    s = ref.SHAPES[case["shape"]]
    for layout in LAYOUTS[case["shape"]]:
        manifest = Manifest.read(case[f"{layout}_bundle"])
        spec = manifest.multi_vector
        assert spec is not None and manifest.source.kind == layout.replace("_", "-")
        assert (spec.size, spec.query_length, spec.document_length) == (s["size"], s["query_length"],
                                                                       s["document_length"])
        assert manifest.max_length >= s["document_length"]
        assert [g.kind for g in manifest.graphs if g.variant == "fp32"] == ["fast", "attention"]


def test_without_expansion_the_graph_differs(case: dict[str, Any]) -> None:
    """Broken on purpose: fed without the [MASK] expansion, the same graph no longer gives PyLate's queries."""
    got, want = served(case["pylate_bundle"], expand=False), case["pylate"]
    assert [len(q) for q in got["queries"]] != [len(q) for q in want["queries"]]
    assert np.abs(got["scores"] - want["scores"]).max() > 1e-3
