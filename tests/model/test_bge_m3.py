"""bge-m3 in PyTorch against FlagEmbedding's BGEM3FlagModel: a random XLM-R with FlagEmbedding's colbert_linear.pt and
sparse_linear.pt beside it (tests/helpers/bge_m3.py) loads into our encoder with its multi-vector outputs, and our
one forward pass, through the torch-free inference/tasks/multi_vector_scores.py, gives BGEM3FlagModel's dense vectors,
lexical
weights (same ids) and colbert vectors, and its lexical and colbert scores, to 1e-5, at a tiny and a realistic shape
(4 layers, heads of width 64, inputs of up to 256 tokens, one cut there)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from bundle.feeds import pad
from inference.tasks import multi_vector_scores
from model.checkpoint import LoadedModel
from model.load import load_model
from model.tokenizer import pad_id, token_ids
from tests.helpers import bge_m3

TOLERANCE = 1e-5


@dataclasses.dataclass
class Case:
    directory: Path
    model: LoadedModel
    reference: Any  # BGEM3FlagModel
    texts: list[str]
    expected: dict[str, Any]


@pytest.fixture(scope="module", params=["tiny", "realistic"])
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Case:
    directory = tmp_path_factory.mktemp(f"bge-m3-{request.param}")
    bge_m3.save_bge_m3(directory, request.param)
    model = load_model(directory)
    texts = bge_m3.TEXTS if request.param == "tiny" else bge_m3.LONG_TEXTS
    reference = bge_m3.reference_model(directory)
    return Case(directory, model, reference, texts,
                bge_m3.encode_reference(reference, texts, model.encoder.config.serving_length))


def ours(model: LoadedModel, texts: list[str]) -> bge_m3.M3Outputs:
    """Our encoder's one forward pass over `texts`, made into BGEM3FlagModel's outputs."""
    assert model.multi_vector is not None
    feeds = pad(token_ids(model.tokenizer, texts, model.encoder.config.serving_length), pad_id(model.tokenizer))
    with torch.no_grad():
        out = model.encoder(torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"]))
    assert out.multi_vectors is not None and out.token_weights is not None
    assert float(out.token_weights.min()) == 0.0  # relu'd: the graph's token_weights are never negative
    pooled = model.encoder.pooled(out.token_states, torch.from_numpy(feeds["attention_mask"]))  # before normalising
    return bge_m3.from_outputs(pooled.numpy(), out.multi_vectors.numpy(), out.token_weights.numpy(), feeds,
                               model.multi_vector, model.encoder.config.normalize)


def test_the_loader_reads_flagembeddings_heads(case: Case) -> None:
    config, spec = case.model.encoder.config, case.model.multi_vector
    width = config.d_model
    assert case.model.kind == "bge-m3"
    assert (config.pooling, config.normalize, config.head) == ("cls", True, "none")
    assert (config.multi_vector_size, config.multi_vector_bias, config.token_weights) == (width, True, True)
    assert spec is not None and spec.size == width
    assert (spec.normalize, spec.reduction, spec.skip_first_token) == (True, "mean", True)
    specials = case.reference.tokenizer.special_tokens_map
    assert spec.sparse_drop_ids == sorted({case.model.tokenizer.token_to_id(specials[name])
                                           for name in ("cls_token", "eos_token", "pad_token", "unk_token")})
    colbert = torch.load(case.directory / "colbert_linear.pt", weights_only=True)
    assert torch.equal(case.model.encoder.multi_vector.weight, colbert["weight"])  # type: ignore[union-attr]
    assert torch.equal(case.model.encoder.multi_vector.bias, colbert["bias"])  # type: ignore[union-attr]


def test_our_tokens_are_flagembeddings(case: Case) -> None:
    length = case.model.encoder.config.serving_length
    expected = case.reference.tokenizer(case.texts, truncation=True, max_length=length)["input_ids"]
    assert token_ids(case.model.tokenizer, case.texts, length) == expected
    assert any(case.model.tokenizer.token_to_id("<unk>") in row for row in expected)  # dropped from the weights


def test_one_pass_gives_bge_m3s_three_outputs(case: Case) -> None:
    got = ours(case.model, case.texts)
    diffs = bge_m3.differences(got, case.expected)
    assert max(diffs.values()) <= TOLERANCE, diffs
    assert case.model.multi_vector is not None
    dropped = set(case.model.multi_vector.sparse_drop_ids)
    kept = [set(ids) - dropped for ids in token_ids(case.model.tokenizer, case.texts, 512)]
    assert any(0 < len(w) < len(ids) for w, ids in zip(got.lexical, kept, strict=True))  # relu's zeros left out


def test_scores_are_flagembeddings(case: Case) -> None:
    pair = [bge_m3.QUERY, bge_m3.DOCUMENT]
    got, expected = ours(case.model, pair), bge_m3.encode_reference(case.reference, pair, 512)
    spec = case.model.multi_vector
    assert spec is not None
    lexical = case.reference.compute_lexical_matching_score(*expected["lexical_weights"])
    colbert = float(case.reference.colbert_score(*expected["colbert_vecs"]))
    assert abs(multi_vector_scores.lexical_score(*got.lexical) - lexical) <= TOLERANCE
    assert abs(multi_vector_scores.maxsim(*got.colbert, spec.reduction) - colbert) <= TOLERANCE
    assert lexical > 0 and colbert != 0


def test_a_wrong_spec_misses_the_reference(case: Case) -> None:
    """The comparison can fail: keeping the CLS vector, or keeping the special tokens' weights, is caught."""
    assert case.model.multi_vector is not None
    for wrong in ({"skip_first_token": False}, {"sparse_drop_ids": []}):
        model = dataclasses.replace(case.model, multi_vector=case.model.multi_vector.model_copy(update=wrong))
        with pytest.raises(AssertionError, match="differ|!="):
            bge_m3.differences(ours(model, case.texts), case.expected)


def test_one_head_file_alone_is_refused(case: Case, tmp_path: Path) -> None:
    shutil.copytree(case.directory, tmp_path / "m3")
    (tmp_path / "m3" / "sparse_linear.pt").unlink()
    with pytest.raises(ValueError, match="sparse_linear.pt is missing"):
        load_model(tmp_path / "m3")


def test_maxsim_explains_each_query_tokens_best_match() -> None:
    query = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=np.float32)
    document = np.array([[0.0, 1.0], [1.0, 0.0], [0.8, 0.6]], dtype=np.float32)
    found = multi_vector_scores.explain(query, document, "sum")
    assert found.best.tolist() == [1, 0, 2]
    np.testing.assert_allclose(found.similarity, [1.0, 1.0, 0.96], atol=1e-6)
    assert found.score == pytest.approx(2.96)
    assert multi_vector_scores.maxsim(query, document, "mean") == pytest.approx(2.96 / 3)
