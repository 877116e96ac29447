"""bge-m3's fast fp32 graph against FlagEmbedding's BGEM3FlagModel: ONE onnxruntime run of a batch gives the dense
vectors, the token weights and the token vectors together, and through the torch-free
inference/tasks/multi_vector_scores.py (as
the manifest's multi_vector section says) they equal BGEM3FlagModel's dense vectors, lexical weights (same ids) and
colbert vectors, and its lexical and colbert scores, to 1e-5. Tiny shape: the whole bundle as `attnserve export`
writes it (both graph kinds, parity-gated, the manifest); realistic shape (4 layers, heads of width 64, inputs up to
256 tokens): the fast graph alone, exported once (a bundle adds half a minute of gates and timings)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bundle.feeds import input_names, pad
from bundle.manifest import Manifest
from bundle.session import open_session
from export.graphs import export_graph, output_names
from inference.tasks import multi_vector_scores
from model.checkpoint import LoadedModel
from model.load import load_model
from model.tokenizer import pad_id, token_ids
from tests.helpers import bge_m3

TOLERANCE = 1e-5
OUTPUTS = ["embeddings", "multi_vectors", "token_weights"]


class CountingSession:
    """An onnxruntime session that counts its runs."""

    def __init__(self, session: Any) -> None:
        self.session, self.runs = session, 0

    def get_inputs(self) -> Any:
        return self.session.get_inputs()

    def run(self, names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        self.runs += 1
        return self.session.run(names, feeds)


@dataclasses.dataclass
class Case:
    model: LoadedModel
    graph: Path
    manifest: Manifest | None  # the tiny shape's bundle's
    reference: Any  # BGEM3FlagModel
    texts: list[str]  # the shape's texts, then the query and the document
    expected: dict[str, Any]


@pytest.fixture(scope="module", params=["tiny", "realistic"])
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Case:
    manifest = None
    if request.param == "tiny":  # the session's tiny bge-m3 bundle (tests/fixtures.py), served by other tests too
        source, bundle = request.getfixturevalue("bge_m3_tiny")
        model, manifest, graph = load_model(source), Manifest.read(bundle), bundle / "fast-fp32.onnx"
    else:
        root = tmp_path_factory.mktemp(f"bge-m3-{request.param}")
        source, graph = root / "source", root / "fast-fp32.onnx"
        bge_m3.save_bge_m3(source, request.param)
        model = load_model(source)
        export_graph(model.encoder, "fast", graph)
    texts = [*(bge_m3.TEXTS if request.param == "tiny" else bge_m3.LONG_TEXTS), bge_m3.QUERY, bge_m3.DOCUMENT]
    reference = bge_m3.reference_model(source)
    expected = bge_m3.encode_reference(reference, texts, model.encoder.config.serving_length)
    return Case(model, graph, manifest, reference, texts, expected)


def run_graph(case: Case) -> tuple[bge_m3.M3Outputs, int]:
    """The fast graph over all the case's texts in one padded batch, made into BGEM3FlagModel's outputs; and how many
    runs that took."""
    spec = case.model.multi_vector
    assert spec is not None
    session = CountingSession(open_session(case.graph, "cpu"))
    ids = token_ids(case.model.tokenizer, case.texts, case.model.encoder.config.serving_length)
    feeds = pad(ids, pad_id(case.model.tokenizer), input_names(session))
    dense, vectors, weights = session.run(OUTPUTS, feeds)
    got = bge_m3.from_outputs(dense, vectors, weights, feeds, spec, case.model.encoder.config.normalize)
    return got, session.runs


def test_one_graph_run_gives_bge_m3s_three_outputs(case: Case) -> None:
    got, runs = run_graph(case)
    assert runs == 1
    diffs = bge_m3.differences(got, case.expected)
    assert max(diffs.values()) <= TOLERANCE, diffs


def test_graph_scores_are_flagembeddings(case: Case) -> None:
    got, _ = run_graph(case)
    spec = case.model.multi_vector
    assert spec is not None
    lexical = case.reference.compute_lexical_matching_score(*case.expected["lexical_weights"][-2:])
    colbert = float(case.reference.colbert_score(*case.expected["colbert_vecs"][-2:]))
    assert abs(multi_vector_scores.lexical_score(*got.lexical[-2:]) - lexical) <= TOLERANCE
    assert abs(multi_vector_scores.maxsim(*got.colbert[-2:], spec.reduction) - colbert) <= TOLERANCE
    assert lexical > 0


def test_the_graphs_output_every_kind_before_the_maps(case: Case) -> None:
    config = case.model.encoder.config
    assert output_names(config, "fast") == ["embeddings", "token_embeddings", "multi_vectors", "token_weights"]
    assert output_names(config, "attention")[-3:] == ["multi_vectors", "token_weights", "attentions"]
    session = open_session(case.graph, "cpu")
    shapes = {o.name: o.shape for o in session.get_outputs()}
    assert shapes["multi_vectors"][2] == config.multi_vector_size and len(shapes["token_weights"]) == 2


@pytest.mark.parametrize("case", ["tiny"], indirect=True)  # the realistic shape exports the fast graph alone
def test_the_manifest_carries_the_spec_and_reads_back(case: Case) -> None:
    assert case.manifest is not None
    bundle_dir = case.graph.parent
    assert case.manifest.multi_vector == case.model.multi_vector
    assert Manifest.read(bundle_dir) == case.manifest
    assert case.manifest.source.kind == "bge-m3" and case.manifest.normalize
    for entry in case.manifest.graphs:  # gated on real tokens like token_embeddings
        assert entry.parity["multi_vectors_max_abs_diff"] <= TOLERANCE * max(1, entry.parity["multi_vectors_max_abs"])
        assert entry.parity["token_weights_max_abs_diff"] <= TOLERANCE * max(1, entry.parity["token_weights_max_abs"])
    data = json.loads((bundle_dir / "manifest.json").read_text())
    assert data["multi_vector"]["sparse_drop_ids"] == [0, 1, 2, 3]  # <s> <pad> </s> <unk>
    without = {**data, "multi_vector": None}
    with pytest.raises(ValueError, match="multi_vector"):  # the config has multi-vector outputs: a spec is required
        Manifest.model_validate(without)
    plain = {**data, "model_config": {**data["model_config"], "multi_vector_size": 0, "token_weights": False}}
    del plain["multi_vector"]
    assert "multi_vector" not in json.loads(Manifest.model_validate(plain).to_json())  # older bundles read as before
