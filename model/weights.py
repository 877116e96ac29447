"""A checkpoint's tensors as its files hold them, in every layout transformers reads: one model.safetensors or
pytorch_model.bin, or shards listed by model.safetensors.index.json / pytorch_model.bin.index.json; and the
legacy LayerNorm names old checkpoints (TF-era BERT, SPLADE) were saved with, `LayerNorm.gamma` / `LayerNorm.beta`,
renamed to `.weight` / `.bias` as transformers' own "legacy" conversion renames them on load.

Pickled weights are read through torch.load(weights_only=True), never as a free pickle.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import Tensor

SINGLE = ("model.safetensors", "pytorch_model.bin")
INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
# transformers' legacy renamings (conversion_mapping "legacy"): regular expressions, as there
LEGACY = ((re.compile(r"LayerNorm.gamma"), "LayerNorm.weight"), (re.compile(r"LayerNorm.beta"), "LayerNorm.bias"))


def load_weights(path: Path) -> dict[str, Tensor]:
    """Every tensor of the checkpoint at `path` (one file, else the shards its index lists), legacy names renamed."""
    path = Path(path)
    for name in SINGLE:
        if (path / name).is_file():
            return legacy_names(_read(path / name))
    for name in INDEXES:
        if (path / name).is_file():
            return legacy_names(_read_shards(path, name))
    raise FileNotFoundError(f"{path} has no weights: none of {', '.join(SINGLE + INDEXES)} is there")


def weight_files(path: Path) -> list[Path]:
    """The files that hold the checkpoint's weights, in the order load_weights reads them (an index, then its
    shards); [] when there are none."""
    path = Path(path)
    for name in SINGLE:
        if (path / name).is_file():
            return [path / name]
    for name in INDEXES:
        if (path / name).is_file():
            weight_map = json.loads((path / name).read_text()).get("weight_map") or {}
            return [path / name, *(path / shard for shard in sorted(set(weight_map.values())))]
    return []


def legacy_names(weights: dict[str, Tensor]) -> dict[str, Tensor]:
    """LayerNorm.gamma / LayerNorm.beta -> LayerNorm.weight / LayerNorm.bias, as transformers renames them."""
    renamed = {}
    for key, value in weights.items():
        for pattern, target in LEGACY:
            key = pattern.sub(target, key)
        renamed[key] = value
    return renamed


def _read(file: Path) -> dict[str, Tensor]:
    if file.suffix == ".safetensors":
        return load_file(str(file))
    return torch.load(file, map_location="cpu", weights_only=True)


def _read_shards(path: Path, index: str) -> dict[str, Tensor]:
    """The shards an index's weight_map names, each read once; a shard it names that is missing is an error."""
    weight_map = json.loads((path / index).read_text()).get("weight_map") or {}
    shards = sorted(set(weight_map.values()))
    missing = [shard for shard in shards if not (path / shard).is_file() or "/" in shard or "\\" in shard]
    if missing or not shards:
        raise FileNotFoundError(f"{path / index} names shards that are not in {path}: {', '.join(missing) or 'none'}")
    weights: dict[str, Tensor] = {}
    for shard in shards:
        weights |= _read(path / shard)
    return weights
