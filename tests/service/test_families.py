"""Every family served, against transformers itself: one real `attnserve serve` process serves a random-weight
...ForSequenceClassification bundle of each family side by side (`--bundle NAME=DIR`, tests/helpers/exports.py),
and over HTTP its token vectors (/embed_all), pooled embeddings (/embed with normalize false, /v1/embeddings),
logits (/classify raw_scores, /v2 infer) and attention maps (/attention, /v2 infer) equal transformers' outputs
for the same texts to max abs 1e-5, at two input shapes: ten multilingual texts of different lengths in one
request, and one text cut to the model's max length (every position used; chunked, its first window is that
cut: the family's special tokens wrap each window).

CamemBERT loads through the same family code and table as XLM-RoBERTa and ships the same kind of tokenizer
(Unigram), so XLM-RoBERTa stands for it; RoBERTa (byte-level BPE) is served on its own.

Shape letters: N texts, T tokens, L layers, H heads, D hidden, C labels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pytest
import torch

from bundle.manifest import Manifest
from model.tokenizer import encode, load_tokenizer
from tests.helpers.exports import CLASSIFIERS, Exported, pooled
from tests.helpers.process import running
from tests.helpers.serving import worst
from tests.helpers.tokenizers import MULTILINGUAL

TOLERANCE = 1e-5
SHAPES = {"multilingual": MULTILINGUAL, "full length": [" ".join(MULTILINGUAL * 2)]}


@dataclass
class Reference:
    """transformers' outputs for N texts, per text over its real tokens."""

    states: list[np.ndarray]  # (n, D) each
    attentions: list[np.ndarray]  # (L, H, n, n) each
    pooled: np.ndarray  # (N, D): the first (a decoder's last) token's state, a checkpoint's pooling without modules
    logits: np.ndarray  # (N, C)


@pytest.fixture(scope="module")
def server(family_export: Callable[[str], Exported], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server process serving every family's classifier, each under its case name; its base URL."""
    bundles = [family_export(name).bundle for name in CLASSIFIERS]
    flags = [flag for name, bundle in zip(CLASSIFIERS[1:], bundles[1:], strict=True)
             for flag in ("--bundle", f"{name}={bundle}")]
    with running(bundles[0], tmp_path_factory.mktemp("families") / "server.log", *flags) as served:
        yield served.url


def reference(exported: Exported, texts: list[str]) -> Reference:
    """transformers' model on the texts tokenised as the bundle's tokenizer does (right-padded, cut to max_length)."""
    manifest = Manifest.read(exported.bundle)
    ids, mask = encode(load_tokenizer(exported.source / "tokenizer.json"), texts, manifest.max_length)
    with torch.no_grad():
        body = exported.reference.base_model(input_ids=ids, attention_mask=mask, output_attentions=True)
        logits = exported.reference(input_ids=ids, attention_mask=mask).logits  # (N, C)
    states, attentions = body.last_hidden_state, torch.stack(body.attentions, dim=1)  # (N, T, D), (N, L, H, T, T)
    lengths = mask.sum(1).tolist()
    return Reference([states[i, :n].numpy() for i, n in enumerate(lengths)],
                     [attentions[i, :, :, :n, :n].numpy() for i, n in enumerate(lengths)],
                     pooled(states, mask, exported.arch).numpy(), logits.numpy())


def post(url: str, path: str, body: dict[str, Any]) -> Any:
    response = httpx.post(url + path, json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()



@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("case", CLASSIFIERS)
def test_served_answers_equal_transformers(server: str, family_export: Callable[[str], Exported], case: str,
                                           shape: str) -> None:
    texts, exported = SHAPES[shape], family_export(case)
    expected = reference(exported, texts)
    labels = Manifest.read(exported.bundle).labels
    ask = {"inputs": texts, "model": case}
    embedded = post(server, "/embed", {**ask, "normalize": False})
    openai = post(server, "/v1/embeddings", {"input": texts, "model": case})["data"]
    per_token = post(server, "/embed_all", ask)
    scored = post(server, "/classify", {**ask, "raw_scores": True})
    maps = post(server, "/attention", ask)["data"]
    logits = [[dict((s["label"], s["score"]) for s in one)[label] for label in labels] for one in scored]
    diffs = {
        "embed": worst(embedded, expected.pooled),
        "v1/embeddings": worst([d["embedding"] for d in openai], expected.pooled),
        "classify": worst(logits, expected.logits),
        "embed_all": max(worst(got, want) for got, want in zip(per_token, expected.states, strict=True)),
        "attention": max(worst(m["attention"], want) for m, want in zip(maps, expected.attentions, strict=True)),
    }
    if shape == "full length":  # every position the model has; chunked, the first window is the text cut there
        assert len(per_token[0]) == Manifest.read(exported.bundle).max_length
        windows = post(server, "/embed", {**ask, "normalize": False, "chunking": "windows", "chunk_overlap": 8})[0]
        assert len(windows) > 1 and windows[0]["start"] == 0 and windows[-1]["stop"] >= len(texts[0].rstrip())
        diffs["first window"] = worst(windows[0]["embedding"], expected.pooled[0])
    assert max(diffs.values()) <= TOLERANCE, diffs


@pytest.mark.parametrize("case", ["xlm-roberta-scorer", "qwen3-classifier"])
def test_v2_infer_equals_transformers(server: str, family_export: Callable[[str], Exported], case: str) -> None:
    """The Open Inference Protocol on a non-BERT encoder and a decoder: metadata with its sizes, and one infer
    request's embeddings (not normalised: the manifest says so), logits and attention maps (zero-padded to T)."""
    exported, texts = family_export(case), MULTILINGUAL[:4]
    expected = reference(exported, texts)
    metadata = httpx.get(f"{server}/v2/models/{case}").json()
    shapes = {o["name"]: o["shape"] for o in metadata["outputs"]}
    sizes = {"xlm-roberta-scorer": (32, 1), "qwen3-classifier": (48, 3)}[case]
    assert (shapes["embeddings"], shapes["logits"]) == ([-1, sizes[0]], [-1, sizes[1]]), metadata
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(texts)], "data": texts}],
            "outputs": [{"name": name} for name in ("embeddings", "logits", "attentions", "attention_mask")]}
    outputs = {o["name"]: o for o in post(server, f"/v2/models/{case}/infer", body)["outputs"]}

    def tensor(name: str) -> np.ndarray:
        return np.asarray(outputs[name]["data"], dtype=np.float32).reshape(outputs[name]["shape"])

    lengths = tensor("attention_mask").sum(1).astype(int)
    assert worst(tensor("embeddings"), expected.pooled) <= TOLERANCE
    assert worst(tensor("logits"), expected.logits) <= TOLERANCE
    attentions = tensor("attentions")  # (N, L, H, T, T)
    for row, (n, want) in enumerate(zip(lengths, expected.attentions, strict=True)):
        assert worst(attentions[row, :, :, :n, :n], want) <= TOLERANCE


def test_one_label_scorer_gets_the_sigmoid_of_its_logit(server: str,
                                                         family_export: Callable[[str], Exported]) -> None:
    """A softmax over one logit is always 1.0: /classify, /predict and /v2's `scores` give a one-label model (an
    XLM-RoBERTa cross-encoder, as bge-reranker is) the sigmoid of its logit, as sentence-transformers'
    CrossEncoder does; a request may still ask for softmax."""
    case, texts = "xlm-roberta-scorer", MULTILINGUAL[:3]
    expected = 1 / (1 + np.exp(-reference(family_export(case), texts).logits))  # (N, 1)
    classified = post(server, "/classify", {"inputs": texts, "model": case})
    assert worst([[one[0]["score"]] for one in classified], expected) <= TOLERANCE
    assert {one[0]["label"] for one in classified} == {"relevant"}
    predicted = post(server, "/predict", {"inputs": [[t] for t in texts], "model": case})
    assert worst([[one[0]["score"]] for one in predicted], expected) <= TOLERANCE
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(texts)], "data": texts}],
            "outputs": [{"name": "scores"}]}
    (scores,) = post(server, f"/v2/models/{case}/infer", body)["outputs"]
    assert worst(np.reshape(scores["data"], scores["shape"]), expected) <= TOLERANCE
    asked = post(server, "/predict", {"inputs": texts[0], "model": case,
                                      "parameters": {"function_to_apply": "softmax"}})
    assert asked == [{"label": "relevant", "score": 1.0}]


def test_info_and_models_name_each_family(server: str) -> None:
    info = httpx.get(server + "/info").json()
    families = {m["name"]: m["architecture"] for m in info["models"]}
    assert families == {"bert-classifier": "bert", "roberta-classifier": "roberta",
                        "xlm-roberta-scorer": "roberta", "distilbert-classifier": "distilbert",
                        "mpnet-classifier": "mpnet", "modernbert-classifier": "modernbert",
                        "qwen3-classifier": "qwen3", "embeddinggemma-scorer": "gemma3",
                        "nomicbert-classifier": "nomicbert", "gte-classifier": "gte", "jina-classifier": "jina"}
    windows = {m["name"]: m["attention_windows"] for m in info["models"]}
    assert windows["modernbert-classifier"] == [None, 2, None]  # local_attention 4: two tokens each side
    assert windows["bert-classifier"] == [None, None]
    assert windows["qwen3-classifier"] == [None, 3, 3]  # sliding from layer 1 on, keys i - 3 .. i
    assert windows["embeddinggemma-scorer"] == [4, None, 4]  # bidirectional: a width of 8 is 4 each side
    listed = httpx.get(server + "/v1/models").json()["data"]
    assert [m["id"] for m in listed] == list(CLASSIFIERS)
