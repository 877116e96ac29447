"""A jina-embeddings-v3-shaped test model: a random-weight BERT under sentence-transformers' mean pooling and
Normalize, with prompts named like its tasks, and PEFT LoRA adapters over it (lora_B random), exported into one
bundle whose graphs take each row's adapter; and the reference: the same BERT in transformers with PEFT, the
adapter a row asks for active (eager attention), pooled as sentence-transformers pools.

    made = make_task_model(directory)          -> TaskModel (the directories, the adapters by name)
    bundle = export_task_bundle(made, out)     -> the bundle (export_bundle(..., adapters=...))
    reference = TaskReference(made)            -> .pooled(texts, task, prompt), .attentions(text, task)

Shape: 3 layers, 2 heads of width 64 (hidden 128), 64 positions; the adapters differ in rank, alpha and the
projections they adapt (q/v only; all six; the feed-forward only), so one read wrongly shows in the outputs.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

from tests.helpers import tokenizers
from tests.helpers.adapters import peft_reference, run_reference, save_adapter
from tests.helpers.families import save_random

PROMPTS = {"retrieval.query": "Represent the query for retrieval: ", "retrieval.passage": "Represent the passage: "}
LORAS: dict[str, dict[str, Any]] = {  # PEFT LoraConfig fields per adapter, in the bundle's order
    "retrieval.query": dict(r=4, lora_alpha=8, target_modules=["query", "value"]),
    "retrieval.passage": dict(r=8, lora_alpha=16, target_modules=["query", "key", "value", "output.dense",
                                                                   "intermediate.dense"]),
    "text-matching": dict(r=2, lora_alpha=4, target_modules=["intermediate.dense", "output.dense"]),
}
TASKS = tuple(LORAS)
MAX_LENGTH = 64


@dataclass(frozen=True)
class TaskModel:
    source: Path  # the sentence-transformers directory (the export's source)
    base: Path  # its transformer (the adapters' base)
    adapters: dict[str, Path]  # PEFT directories by task name


def _load_base(path: Path) -> torch.nn.Module:
    return transformers.BertModel.from_pretrained(path, attn_implementation="eager", add_pooling_layer=False)


def make_task_model(directory: Path) -> TaskModel:
    """The ST directory at `directory` (its BERT in directory/hf) and one PEFT adapter per LORAS entry."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    base = Path(directory) / "hf"
    tokenizer = tokenizers.wordpiece()
    config = transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=128, num_attention_heads=2,
                                     num_hidden_layers=3, intermediate_size=256, max_position_embeddings=MAX_LENGTH)
    save_random(base, transformers.BertModel, config, tokenizer, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformer = Transformer(str(base), max_seq_length=MAX_LENGTH)
        modules = [transformer, Pooling(128, pooling_mode="mean"), Normalize()]
        SentenceTransformer(modules=modules, prompts=PROMPTS).save(str(directory))
    adapters = {name: save_adapter(base, Path(directory) / "adapters" / name, _load_base, seed=seed, **lora)
                for seed, (name, lora) in enumerate(LORAS.items(), start=11)}
    return TaskModel(Path(directory), base, adapters)


def export_task_bundle(made: TaskModel, out: Path, name: str = "jina") -> Path:
    from export.bundle import export_bundle

    export_bundle(made.source, out, variants=("fp32",), name=name, adapters=made.adapters)
    return out


def _peft(task: str | None) -> str | None:
    """The task's name in PEFT, whose adapter names cannot hold a dot (they name torch modules)."""
    return task.replace(".", "_") if task is not None else None


class TaskReference:
    """transformers + PEFT with every adapter loaded; sentence-transformers' tokenizer and mean pooling."""

    def __init__(self, made: TaskModel) -> None:
        from tests.helpers.sentence import load_reference

        self.sentence: Any = load_reference(made.source)
        self.model = peft_reference(made.base, _load_base, {_peft(n): path for n, path in made.adapters.items()})

    def _run(self, texts: list[str], task: str | None, prompt: str, **options: Any) -> tuple[Any, torch.Tensor]:
        features = self.sentence.tokenize([prompt + text for text in texts])
        inputs = {k: features[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in features}
        return run_reference(self.model, _peft(task), **inputs, **options), features["attention_mask"]

    def pooled(self, texts: list[str], task: str | None, prompt: str = "") -> np.ndarray:
        """(N, D) mean-pooled last hidden states, before normalisation, of each text after `prompt`."""
        out, mask = self._run(texts, task, prompt)
        weights = mask.unsqueeze(-1).to(out.last_hidden_state.dtype)  # (N, T, 1)
        return ((out.last_hidden_state * weights).sum(1) / weights.sum(1)).numpy()  # (N, D)

    def unit(self, texts: list[str], task: str | None, prompt: str = "") -> np.ndarray:
        pooled = self.pooled(texts, task, prompt)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    def attentions(self, text: str, task: str | None) -> np.ndarray:
        """(L, H, n, n): one text's attention maps (no padding)."""
        out, _ = self._run([text], task, "", output_attentions=True)
        return torch.stack(out.attentions, dim=1)[0].numpy()  # (L, H, n, n)
