"""Training the other heads: the metrics against hand-worked cases (MRR@10, NDCG@10, entity-level F1 and
the BIO labels of character spans), and `attnserve train --task rerank | tokens` on a tiny BERT directory:
a checkpoint whose head is a one-label cross-encoder or a token classifier, exported as such."""

from __future__ import annotations

import json
import math

import pytest

from bundle.manifest import Manifest
from export.bundle import export_bundle
from model.load import load_model
from model.training.cli import main
from model.training.heads import Spans, entities, entity_report, ranking_report, token_split


def test_ranking_report_mrr_and_ndcg():
    groups = ["a", "a", "a", "b", "b", "c"]
    scores = [0.9, 0.5, 0.1, 0.2, 0.8, 0.3]
    labels = [0, 1, 0, 1, 0, 0]  # a: relevant ranked 2nd; b: relevant ranked 2nd; c: no relevant text (skipped)
    report = ranking_report(groups, scores, labels)
    assert report["mrr@10"] == pytest.approx(0.5) and report["queries"] == 2
    assert report["ndcg@10"] == pytest.approx(1 / math.log2(3))


def test_entities_are_whole_bio_runs():
    names = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
    assert entities([1, 2, 0, 3, 4, 4, 2, 1], names) == [("PER", 0, 1), ("LOC", 3, 5), ("PER", 6, 6), ("PER", 7, 7)]
    report = entity_report({(0, "PER", 0, 1), (0, "LOC", 3, 5)}, {(0, "PER", 0, 1), (0, "LOC", 3, 4)})
    assert (report["entity_precision"], report["entity_recall"], report["entity_f1"]) == (0.5, 0.5, 0.5)


def test_spans_become_bio_labels_per_token(tiny_hf_dir):
    tokenizer = load_model(tiny_hf_dir).tokenizer
    data = Spans(["the film was a great film"], [[(4, 8, "WORK"), (15, 25, "WORK")]])
    names = data.label_names
    split = token_split(tokenizer, data, names, 32)
    tags = [names[t] if t >= 0 else None for t in split.labels[0]]
    encoding = tokenizer.encode("the film was a great film")
    by_token = dict(zip(encoding.tokens, tags, strict=True))
    assert tags[0] is None and tags[-1] is None  # [CLS], [SEP]: no loss
    assert by_token["the"] == "O" and by_token["great"] == "B-WORK" and tags[-2] == "I-WORK"


@pytest.mark.parametrize("task", ["rerank", "tokens"])
def test_cli_trains_each_head_and_it_exports_as_that_task(tmp_path, tiny_hf_dir, task):
    rows = [{"query": f"q{i % 4}", "text": f"the film {w}", "label": int(i % 3 == 0)} for i, w in
            enumerate(["was good", "was bad", "is great", "is dull"] * 4)] if task == "rerank" else \
        [{"text": f"the film was {w}", "spans": [{"start": 4, "end": 8, "label": "WORK"}]} for w in
         ["good", "bad", "great", "dull"] * 4]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "ckpt"
    assert main(["--task", task, "--data", str(data), "--init", str(tiny_hf_dir), "--out", str(out),
                 "--epochs", "1", "--batch-size", "8", "--max-length", "16", "--no-progress", "--device", "cpu"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert ("ndcg@10" if task == "rerank" else "entity_f1") in metrics["best"]
    manifest = export_bundle(out, tmp_path / "bundle")
    assert manifest.task == ("classify" if task == "rerank" else "tokens")
    assert manifest.labels == (["relevance"] if task == "rerank" else ["O", "B-WORK", "I-WORK"])
    assert Manifest.read(tmp_path / "bundle").graph("fast", "fp32") is not None
