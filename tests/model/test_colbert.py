"""ColBERT checkpoints (PyLate folders, colbert-ai checkpoints) loaded by model.load and run in PyTorch, fed and
post-processed by the torch-free inference/tasks/multi_vector_feeds.py and inference/tasks/multi_vector_scores.py,
equal their own libraries
(tests/helpers/colbert.py): every query token vector (the expansion [MASK]s included), every document token vector
left after the skip-list, and the MaxSim scores, to 1e-5, at the tiny and the realistic shape. PyLate's own query
path agrees where no expansion is needed; settings the loader cannot reproduce are refused; without the query
expansion the scores move (broken on purpose)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from inference.tasks import multi_vector_feeds as feeds
from inference.tasks.multi_vector_scores import maxsim
from model.load import load_model
from tests.helpers import colbert as ref

TOLERANCE = 1e-5


@pytest.fixture(scope="module", params=["tiny", "realistic"])
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return ref.build_case(tmp_path_factory.mktemp(f"colbert-{request.param}"), request.param)


def ours(path: Path, expand: bool = True) -> dict[str, Any]:
    """Our vectors and scores: model.load's encoder in PyTorch, fed and post-processed torch-free."""
    loaded = load_model(path)
    spec = loaded.multi_vector if expand else loaded.multi_vector.model_copy(update={"query_length": 0})
    assert spec is not None
    max_length = loaded.encoder.config.max_seq_length
    out = {}
    for kind, make, texts in (("queries", feeds.query_feed, ref.QUERIES),
                              ("documents", feeds.document_feed, ref.DOCUMENTS)):
        feed = make(loaded.tokenizer, texts, spec, max_length, loaded.encoder.config.pad_token_id)
        with torch.no_grad():
            result = loaded.encoder(torch.from_numpy(feed.input_ids), torch.from_numpy(feed.attention_mask))
        out[kind] = feeds.token_vectors(result.multi_vectors.numpy(), feed, spec)
    out["scores"] = np.array([[maxsim(q, d, spec.reduction) for d in out["documents"]] for q in out["queries"]])
    return out


@pytest.mark.parametrize("layout", ["pylate", "colbert_ai"])
def test_equal_to_the_reference(case: dict[str, Any], layout: str) -> None:
    got, want = ours(case[f"{layout}_dir"]), case[layout]
    ref.assert_equal_vectors(got["queries"], want["queries"])
    ref.assert_equal_vectors(got["documents"], want["documents"])
    np.testing.assert_allclose(got["scores"], want["scores"], rtol=0, atol=TOLERANCE)


def test_the_layouts_and_their_settings_are_read(case: dict[str, Any]) -> None:
    pylate, colbert_ai = load_model(case["pylate_dir"]), load_model(case["colbert_ai_dir"])
    s = ref.SHAPES[case["shape"]]
    for loaded, kind in ((pylate, "pylate"), (colbert_ai, "colbert-ai")):
        spec = loaded.multi_vector
        assert loaded.kind == kind and spec is not None
        assert (spec.size, spec.query_length, spec.document_length) == (s["size"], s["query_length"],
                                                                       s["document_length"])
        assert spec.attend_to_expansion == (case["shape"] == "realistic")
        assert spec.expansion_token_id == loaded.tokenizer.token_to_id("[MASK]")
        assert not loaded.encoder.config.multi_vector_bias
    assert pylate.multi_vector.query_prefix_ids == [pylate.tokenizer.token_to_id("[Q] ")]
    assert colbert_ai.multi_vector.document_prefix_ids == [colbert_ai.tokenizer.token_to_id("[unused1]")]
    model = case["pylate_model"]  # PyLate's own skip-list ids (the [UNK] id for punctuation outside the vocabulary)
    assert pylate.multi_vector.skip_ids == sorted(set(model.skiplist))
    assert pylate.tokenizer.token_to_id("[UNK]") in pylate.multi_vector.skip_ids


def test_the_skip_list_drops_what_theirs_drops(case: dict[str, Any]) -> None:
    """The punctuation-heavy document loses the same number of tokens in ours and in both references, and some."""
    loaded = load_model(case["pylate_dir"])
    pad_id = loaded.encoder.config.pad_token_id
    feed = feeds.document_feed(loaded.tokenizer, ref.DOCUMENTS, loaded.multi_vector, 512, pad_id)
    real = feed.attention_mask.sum(1)
    kept = [len(v) for v in case["pylate"]["documents"]]
    assert kept[-1] < real[-1]  # something was skipped
    assert kept == [len(v) for v in ours(case["pylate_dir"])["documents"]]


def test_without_expansion_the_queries_differ(case: dict[str, Any]) -> None:
    """Broken on purpose: queries fed without their [MASK] expansion lose the expansion vectors and the scores move."""
    got, want = ours(case["colbert_ai_dir"], expand=False), case["colbert_ai"]
    assert [len(q) for q in got["queries"]] != [len(q) for q in want["queries"]]
    assert np.abs(got["scores"] - want["scores"]).max() > 1e-3


def test_pylate_itself_agrees_on_full_length_queries(case: dict[str, Any]) -> None:
    """PyLate's own encode (whose queries sentence-transformers 6.3 no longer pads) on the queries that fill the query
    length without expansion: its prefix, truncation and vectors are ours too."""
    length = ref.SHAPES[case["shape"]]["query_length"]
    theirs = ref.pylate_vectors(case["pylate_model"], ref.QUERIES, is_query=True)
    full = [i for i, v in enumerate(theirs) if len(v) == length]
    assert full  # the long query at least
    got = ours(case["pylate_dir"])["queries"]
    ref.assert_equal_vectors([got[i] for i in full], [theirs[i] for i in full], TOLERANCE)


@pytest.mark.parametrize("edit", ["no expansion", "dense activation", "l2 similarity"])
def test_what_cannot_be_reproduced_is_refused(case: dict[str, Any], edit: str, tmp_path: Path) -> None:
    """A setting the loader does not reproduce is refused by name, not served differently from the library."""
    layout = "colbert_ai_dir" if edit == "l2 similarity" else "pylate_dir"
    copy = Path(shutil.copytree(case[layout], tmp_path / "copy"))
    file, key, value = {
        "no expansion": ("config_sentence_transformers.json", "do_query_expansion", False),
        "dense activation": ("1_Dense/config.json", "activation_function", "torch.nn.modules.activation.Tanh"),
        "l2 similarity": ("artifact.metadata", "similarity", "l2"),
    }[edit]
    config = json.loads((copy / file).read_text())
    (copy / file).write_text(json.dumps({**config, key: value}))
    with pytest.raises(ValueError, match="not supported"):
        load_model(copy)


@pytest.mark.parametrize("variant", ["modernbert", "bias"])
def test_other_pylate_folders_equal_pylate(tmp_path: Path, variant: str) -> None:
    """The loader is the families' (model/families): a PyLate folder over ModernBERT (byte-level BPE, local layers,
    its own [MASK] id), and one whose Dense has a bias, equal PyLate on their documents and sentence-transformers'
    reading on their expanded queries."""
    directory, model = ref.save_pylate(tmp_path, "tiny", **{variant: True})
    queries = ref.mve_queries(ref.mve_reference(directory), ref.QUERIES)
    documents = ref.pylate_vectors(model, ref.DOCUMENTS, is_query=False)
    got = ours(directory)
    config = load_model(directory).encoder.config
    assert (config.window_size, config.multi_vector_bias) == ((12, False) if variant == "modernbert" else (0, True))
    ref.assert_equal_vectors(got["queries"], queries, TOLERANCE)
    ref.assert_equal_vectors(got["documents"], documents, TOLERANCE)
    np.testing.assert_allclose(got["scores"], ref.pylate_scores(queries, documents), rtol=0, atol=TOLERANCE)
