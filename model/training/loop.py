"""The training loop: AdamW, linear warm-up then linear decay, gradient clipping, evaluation per epoch.

What is trained and how a batch becomes logits is a Task: TextTask runs the whole encoder on token
ids; model.training.features.FeatureTask runs only the head on token states cached from a frozen encoder.
The loop knows neither. Shape letters: B batch, T sequence length, D d_model, C classes.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from model.tokenizer import pad_batch
from model.training.data import batch_order
from model.training.metrics import classification_report

log = logging.getLogger(__name__)

Batch = tuple[tuple[Tensor, Tensor], Tensor]  # ((inputs (B, T, ...), attention_mask (B, T)), labels (B,))


@dataclass(frozen=True)
class TrainSettings:
    epochs: int = 3
    batch_size: int = 32
    lr: float = 5e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = 0
    progress: bool = True


@dataclass
class Split:
    examples: list[Any]  # one per example: a list of token ids, or cached states (T_i, D)
    labels: list[Any]  # a class index, a relevance (rerank) or a label per token (tokens)
    lengths: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lengths = self.lengths or [len(e) for e in self.examples]


class Task:
    """A module to train, train/held-out splits, and how examples collate into a batch."""

    def __init__(self, module: nn.Module, train: Split, val: Split, batch_size: int, device: torch.device) -> None:
        self.module, self.train, self.val = module, train, val
        self.batch_size, self.device = batch_size, device

    def collate(self, examples: Sequence[Any]) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def logits(self, inputs: tuple[Tensor, Tensor]) -> Tensor:
        raise NotImplementedError

    def collate_labels(self, labels: Sequence[Any]) -> Tensor:
        return torch.tensor(labels, dtype=torch.long)  # (B,) class indices

    def loss(self, logits: Tensor, labels: Tensor, reduction: str = "mean") -> Tensor:
        return F.cross_entropy(logits, labels, reduction=reduction)

    def evaluate(self, label_names: Sequence[str]) -> dict[str, Any]:
        """The held-out figures of one epoch (a classifier's: loss, accuracy, macro-F1, per class)."""
        return evaluate(self, label_names)

    def batches(self, split: Split, rng: random.Random | None) -> Iterator[Batch]:
        for indices in batch_order(split.lengths, self.batch_size, rng is not None, rng or random.Random()):
            inputs, attention_mask = self.collate([split.examples[i] for i in indices])
            labels = self.collate_labels([split.labels[i] for i in indices])
            yield (inputs.to(self.device), attention_mask.to(self.device)), labels.to(self.device)

    def steps_per_epoch(self) -> int:
        return math.ceil(len(self.train.labels) / self.batch_size)


class TextTask(Task):
    """The whole encoder (embeddings, blocks, head) on token ids."""

    def __init__(self, module: nn.Module, train: Split, val: Split, batch_size: int, device: torch.device,
                 pad: int) -> None:
        super().__init__(module, train, val, batch_size, device)
        self.pad = pad

    def collate(self, examples: Sequence[list[int]]) -> tuple[Tensor, Tensor]:
        return pad_batch(examples, self.pad)  # (B, T), (B, T)

    def logits(self, inputs: tuple[Tensor, Tensor]) -> Tensor:
        input_ids, attention_mask = inputs
        return self.module(input_ids, attention_mask).logits  # (B, C)


def make_optimizer(params: list[nn.Parameter], lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW; biases and LayerNorm weights (the 1-D parameters) get no weight decay, as in BERT."""
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr)


def linear_schedule(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int,
) -> torch.optim.lr_scheduler.LambdaLR:
    """lr factor rises 0 -> 1 over warmup_steps, then falls linearly to 0 at total_steps."""
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def fit(task: Task, settings: TrainSettings, label_names: Sequence[str],
        on_epoch: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Train for settings.epochs; after each epoch evaluate on the held-out split and call on_epoch."""
    params = [p for p in task.module.parameters() if p.requires_grad]
    if not params:
        raise ValueError("nothing to train: every parameter of the module is frozen")
    optimizer = make_optimizer(params, settings.lr, settings.weight_decay)
    total = settings.epochs * task.steps_per_epoch()
    scheduler = linear_schedule(optimizer, math.ceil(settings.warmup_ratio * total), total)
    rng, history = random.Random(settings.seed), []
    for epoch in range(1, settings.epochs + 1):
        started = time.perf_counter()
        train_loss = train_epoch(task, optimizer, scheduler, params, settings, rng, epoch)
        record = {"epoch": epoch, "train_loss": train_loss, "train_seconds": time.perf_counter() - started}
        record.update(task.evaluate(label_names))
        figures = ", ".join(f"{k} {v:.4f}" for k, v in record.items() if isinstance(v, float) and k != "train_seconds")
        log.info("epoch %d: %s", epoch, figures)
        history.append(record)
        if on_epoch is not None:
            on_epoch(record)
    return history


def train_epoch(task: Task, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler,
                params: list[nn.Parameter], settings: TrainSettings, rng: random.Random, epoch: int) -> float:
    """One pass over the training split; returns the mean training loss."""
    task.module.train()
    bar = tqdm(task.batches(task.train, rng), total=task.steps_per_epoch(), unit="batch",
               desc=f"epoch {epoch}/{settings.epochs}", disable=not settings.progress, mininterval=0.5)
    total_loss, seen, started = 0.0, 0, time.perf_counter()
    for inputs, labels in bar:
        loss = task.loss(task.logits(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, settings.max_grad_norm)
        optimizer.step()
        scheduler.step()
        total_loss, seen = total_loss + loss.item() * len(labels), seen + len(labels)
        rate = seen / max(time.perf_counter() - started, 1e-9)
        bar.set_postfix(loss=f"{total_loss / seen:.4f}", ex_per_s=f"{rate:.0f}", lr=f"{scheduler.get_last_lr()[0]:.2e}")
    return total_loss / max(seen, 1)


@torch.no_grad()
def predict(task: Task, split: Split) -> tuple[list[int], float]:
    """(predicted class per example in split order, mean cross-entropy)."""
    task.module.eval()
    predictions: dict[int, int] = {}
    total_loss = 0.0
    order = batch_order(split.lengths, task.batch_size, False, random.Random())
    for indices, (inputs, labels) in zip(order, task.batches(split, None), strict=True):
        logits = task.logits(inputs)  # (B, C)
        total_loss += F.cross_entropy(logits, labels, reduction="sum").item()
        predictions.update(zip(indices, logits.argmax(dim=-1).tolist(), strict=True))
    return [predictions[i] for i in range(len(split.labels))], total_loss / len(split.labels)


def evaluate(task: Task, label_names: Sequence[str]) -> dict[str, Any]:
    predictions, loss = predict(task, task.val)
    return {"val_loss": loss, **classification_report(task.val.labels, predictions, label_names)}
