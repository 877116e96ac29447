"""A checkpoint's tensors as its files hold them, in every layout transformers reads, found in transformers' own
order (modeling_utils, a local directory): model.safetensors, model.safetensors.index.json and its shards,
pytorch_model.bin, pytorch_model.bin.index.json and its shards. The first that is there is the checkpoint, so a
directory holding sharded safetensors and an old pytorch_model.bin loads the safetensors, as transformers does.

Old checkpoints (TF-era BERT, SPLADE) name their LayerNorm parameters gamma / beta. transformers renames them on
load by its "legacy" conversion (conversion_mapping.py): the pattern `LayerNorm.gamma` (a regular expression, so
the dot is any character) not followed by a word character, first match only, becomes `LayerNorm.weight`, and
`LayerNorm.beta` becomes `LayerNorm.bias`. Only keys with LayerNorm in them: a `.gamma` elsewhere (a layer scale)
keeps its name, and so it does here. The rest of that legacy list (weight-norm `weight_g` / `weight_v`, a
multimodal prefix fix) names modules our families do not have; such keys reach the family's table and are
refused there, naming them.

What is refused, naming the file or tensor: no weights at all; an index without a weight_map, or naming a shard
that is missing or outside the directory; a tensor the index places in a shard that does not hold it; and two
tensors that end up under one name (a checkpoint holding both LayerNorm.gamma and LayerNorm.weight).
Pickled weights are read through torch.load(weights_only=True), never as a free pickle.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import Tensor

# transformers' search order for a local directory: (file, whether it is an index of shards)
LAYOUTS = (("model.safetensors", False), ("model.safetensors.index.json", True),
           ("pytorch_model.bin", False), ("pytorch_model.bin.index.json", True))
# transformers' legacy renamings, each compiled as its WeightRenaming compiles it: a pattern ending in a word
# character gets (?!\w), so LayerNorm.gamma_x or LayerNorm.gammas keep their names
LEGACY = ((re.compile(r"LayerNorm.gamma(?!\w)"), "LayerNorm.weight"),
          (re.compile(r"LayerNorm.beta(?!\w)"), "LayerNorm.bias"))


def load_weights(path: Path) -> dict[str, Tensor]:
    """Every tensor of the checkpoint at `path` (one file, else the shards its index lists), legacy names renamed."""
    path = Path(path)
    name, sharded = _layout(path)
    return legacy_names(_read_shards(path, name) if sharded else _read(path / name))


def weight_files(path: Path) -> list[Path]:
    """The files that hold the checkpoint's weights, in the order load_weights reads them (an index, then its
    shards); [] when there are none."""
    path = Path(path)
    try:
        name, sharded = _layout(path)
    except FileNotFoundError:
        return []
    return [path / name, *(path / shard for shard in shard_names(path / name))] if sharded else [path / name]


def legacy_names(weights: dict[str, Tensor]) -> dict[str, Tensor]:
    """LayerNorm.gamma / LayerNorm.beta -> LayerNorm.weight / LayerNorm.bias, as transformers renames them; two
    tensors under one name afterwards is an error."""
    renamed: dict[str, Tensor] = {}
    source: dict[str, str] = {}
    for key, value in weights.items():
        name = legacy_name(key)
        if name in renamed:
            raise ValueError(f"checkpoint tensors {source[name]!r} and {key!r} both load as {name!r}")
        renamed[name], source[name] = value, key
    return renamed


def legacy_name(key: str) -> str:
    """One key renamed by each legacy rule in turn; a rule replaces the first occurrence of what it matched,
    exactly as transformers' WeightRenaming.rename_source_key does."""
    for pattern, target in LEGACY:
        match = pattern.search(key)
        if match is not None:
            key = key.replace(match.group(0), target, 1)
    return key


def shard_names(index: Path) -> list[str]:
    """The shard files an index's weight_map names, sorted, each once (transformers' get_checkpoint_shard_files)."""
    return sorted(set(_weight_map(index).values()))


def _layout(path: Path) -> tuple[str, bool]:
    for name, sharded in LAYOUTS:
        if (path / name).is_file():
            return name, sharded
    raise FileNotFoundError(f"{path} has no weights: none of {', '.join(name for name, _ in LAYOUTS)} is there")


def _weight_map(index: Path) -> dict[str, str]:
    weight_map = json.loads(index.read_text()).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{index} has no weight_map naming the checkpoint's tensors and their shards")
    return weight_map


def _read(file: Path) -> dict[str, Tensor]:
    if file.name.endswith(".safetensors"):
        return load_file(str(file))
    return torch.load(file, map_location="cpu", weights_only=True)


def _read_shards(path: Path, index: str) -> dict[str, Tensor]:
    """The shards an index's weight_map names, each read once, every tensor it lists found where it says."""
    weight_map = _weight_map(path / index)
    for shard in sorted(set(weight_map.values())):
        _check_shard(path, index, shard)
    weights: dict[str, Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        tensors = _read(path / shard)
        duplicated = sorted(tensors.keys() & weights.keys())
        if duplicated:
            raise ValueError(f"{path / index}: tensor(s) {', '.join(duplicated)} are in more than one shard")
        weights |= tensors
    absent = sorted(key for key in weight_map if key not in weights)
    if absent:
        raise ValueError(f"{path / index} lists tensors that its shards do not hold: {', '.join(absent)}")
    return weights


def _check_shard(path: Path, index: str, shard: str) -> None:
    """A shard must be a file inside the checkpoint's directory, by its name: a symlink out of it (the Hugging Face
    cache links each snapshot file to its blob) is fine, a name with .. or an absolute path is not."""
    file = Path(os.path.abspath(path / shard))
    if not file.is_relative_to(os.path.abspath(path)):
        raise ValueError(f"{path / index} names shard {shard!r}, which is outside {path}")
    if not file.is_file():
        raise FileNotFoundError(f"{path / index} names shard {shard!r}, which is not in {path}")
