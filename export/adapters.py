"""LoRA adapters in an export: the manifest's record of each adapter the graphs stack.

PEFT directories are read onto the base's modules by model/peft.py, through the one door
(model.load.load_model(source, adapters=...)), which stacks them into the encoder (model/adapters.py) and hands
them back on LoadedModel.adapters.
"""

from __future__ import annotations

from bundle.manifest import AdapterEntry
from model.peft import Adapter


def manifest_entry(adapter: Adapter) -> AdapterEntry:
    """The manifest's `adapters[]` entry of one adapter: what it is, what it adapts, what it costs."""
    return AdapterEntry(name=adapter.name, rank=adapter.rank, alpha=adapter.alpha, scaling=adapter.scaling,
                        use_rslora=adapter.use_rslora, targets=list(adapter.targets), source=adapter.source,
                        bytes=adapter.bytes)
