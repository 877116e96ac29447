"""PEFT LoRA adapters over random-weight transformers models, saved with save_pretrained, and the PEFT reference.

    save_adapter(base_dir, adapter_dir, target_modules=["query", "value"], r=4, seed=1) -> the adapter's dir
    reference = peft_reference(base_dir, arch, head, {"one": dir1, "two": dir2})

PEFT initialises lora_B to zeros (an embedding's lora_embedding_A), so an adapter fresh from get_peft_model changes
nothing; every lora_B, lora_embedding_A and lora_embedding_B here is re-drawn at random (std 0.1, about the size of
a trained one relative to these tiny weights), so an adapter that is read wrongly (wrong module, scaling,
transposition, block, table row) shows in the outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import peft
import torch


def save_adapter(base_dir: Path, adapter_dir: Path, loader: Callable[[Path], torch.nn.Module], seed: int = 1,
                 **lora: Any) -> Path:
    """A LoRA of `lora` (LoraConfig's fields) over the model `loader(base_dir)` loads, its lora_B random, saved
    at `adapter_dir`."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = peft.get_peft_model(loader(base_dir), peft.LoraConfig(**lora))
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name or "lora_embedding_" in name:
                    param.normal_(0.0, 0.1)
    model.save_pretrained(adapter_dir)
    return adapter_dir


def peft_reference(base_dir: Path, loader: Callable[[Path], torch.nn.Module],
                   adapters: dict[str, Path]) -> peft.PeftModel:
    """The base as transformers loads it (eager attention) with every adapter loaded under its name, in eval."""
    names = list(adapters)
    model = peft.PeftModel.from_pretrained(loader(base_dir), adapters[names[0]], adapter_name=names[0])
    for name in names[1:]:
        model.load_adapter(adapters[name], adapter_name=name)
    return model.eval()


def run_reference(model: peft.PeftModel, adapter: str | None, **inputs: Any) -> Any:
    """The PEFT model's outputs with `adapter` active (set_adapter), or with adapters disabled (None: the base)."""
    with torch.no_grad():
        if adapter is None:
            with model.disable_adapter():
                return model(**inputs)
        model.set_adapter(adapter)
        return model(**inputs)
