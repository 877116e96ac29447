"""The weight-table engine: a checkpoint's tensor names mapped onto ours by a family's table (model/families/base.py
says how tables are written). One engine for every reader of checkpoint names: the Hugging Face loader (model/hf.py),
ColBERT's (model/colbert.py) and PEFT adapters' (model/peft.py), whose module names are the checkpoint's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from model.families.base import Family, Table

__all__ = ["expand", "full_table", "hf_layers", "join_parts", "place", "rename"]


def full_table(family: Family, kind: str, hf: dict[str, Any]) -> Table:
    """The family's body table and head kind `kind`'s, with {i} written out for every layer of config.json `hf`."""
    return expand({**family.table, **family.heads.get(kind, {})}, hf_layers(hf))


def rename(weights: dict[str, Tensor], family: Family, kind: str, hf: dict[str, Any]) -> dict[str, Tensor]:
    """The checkpoint's tensors under our names, by the family's table and the head kind's; a tensor the
    tables do not know is an error (naming it), unless it belongs to a head we were not asked for."""
    table = full_table(family, kind, hf)
    other_heads = {k for head in family.heads.values() for k in head}
    out: dict[str, Tensor] = {}
    unknown = []
    for key, value in weights.items():
        name = family.body_name(key)
        module, _, param = name.rpartition(".")
        if name in table:  # a lone parameter, e.g. BERT's cls.predictions.bias (or fused: nn.MultiheadAttention's)
            target = table[name]
            out.update({target: value} if isinstance(target, str) else dict(zip(target, value.chunk(len(target)),
                                                                                 strict=True)))
        elif module in table:
            out.update(place(table[module], param, value))
        elif not (module in other_heads or name.startswith(family.ignored) or name.endswith("position_ids")):
            unknown.append(key)
    if unknown:
        raise ValueError(f"checkpoint tensors the {family.name} weight table does not map: {', '.join(unknown)}")
    out = join_parts(out)
    return {name: value.reshape(1, -1, value.size(-1)) if name in family.flat else value for name, value in out.items()}


def hf_layers(hf: dict[str, Any]) -> int:
    """The layer count: transformers' name, DistilBERT's, or the GPT-2 style one of nomic's custom code."""
    return int(hf.get("num_hidden_layers") or hf.get("n_layer") or hf["n_layers"])


def expand(table: Table, num_layers: int) -> Table:
    """Table keys with {i} written out for every layer."""
    out: Table = {}
    for key, value in table.items():
        for i in range(num_layers) if "{i}" in key else [0]:
            out[key.format(i=i)] = value.format(i=i) if isinstance(value, str) else tuple(
                v.format(i=i) for v in value)
    return out


def place(target: str | tuple[str, ...], param: str, value: Tensor) -> dict[str, Tensor]:
    """One tensor under our name, or split along its first axis into several (a fused q/k/v)."""
    if isinstance(target, str):
        return {f"{target}.{param}": value}
    return {f"{name}.{param}": part for name, part in zip(target, value.chunk(len(target)), strict=True)}


def join_parts(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Tensors placed as parts ("ffn.up#0.weight", "ffn.up#1.weight") joined along the first axis in part order."""
    parts: dict[str, dict[int, Tensor]] = {}
    out = {}
    for name, value in state.items():
        module, hash_, rest = name.partition("#")
        if not hash_:
            out[name] = value
            continue
        index, _, param = rest.partition(".")
        parts.setdefault(f"{module}.{param}", {})[int(index)] = value
    for name, by_index in parts.items():
        out[name] = torch.cat([by_index[i] for i in sorted(by_index)], dim=0)
    return out
