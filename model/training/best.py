"""Keep the best epoch on disk: a full checkpoint whenever held-out accuracy improves, metrics at the end.

The checkpoint is written with model.checkpoint.save_checkpoint (atomic), so an interrupted run
still leaves its best epoch so far; metrics.json is finally rewritten with the whole history through
bundle.files.write_text_atomic. Ties keep the earlier epoch; accuracy decides, macro-F1 breaks exact ties.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from bundle.files import write_text_atomic
from model.checkpoint import save_checkpoint
from model.encoder import Encoder


class BestKeeper:
    def __init__(self, out_dir: Path, encoder: Encoder, tokenizer: Tokenizer, summary: dict[str, Any],
                 keys: tuple[str, ...] = ("accuracy", "macro_f1")) -> None:
        """`keys`: the held-out figures that decide the best epoch, in order (rerank: NDCG@10, MRR@10)."""
        self.out_dir, self.encoder, self.tokenizer = Path(out_dir), encoder, tokenizer
        self.keys = keys
        self.summary = dict(summary)
        self.history: list[dict[str, Any]] = []
        self.best: dict[str, Any] | None = None

    def _better(self, record: dict[str, Any]) -> bool:
        if self.best is None:
            return True
        return tuple(record[k] for k in self.keys) > tuple(self.best[k] for k in self.keys)

    def on_epoch(self, record: dict[str, Any]) -> None:
        self.history.append(record)
        if self._better(record):
            self.best = record
            save_checkpoint(self.out_dir, self.encoder, self.tokenizer, self.metrics())

    def metrics(self) -> dict[str, Any]:
        best = self.best or {}
        return {**self.summary, "best_epoch": best.get("epoch"), "best": best, "history": self.history}

    def finish(self, history: list[dict[str, Any]], total_seconds: float) -> dict[str, Any]:
        self.history = list(history)
        self.summary["total_seconds"] = total_seconds
        metrics = self.metrics()
        write_text_atomic(self.out_dir / "metrics.json", json.dumps(metrics, indent=2) + "\n")
        return metrics
