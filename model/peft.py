"""PEFT LoRA adapter directories -> our stacked adapters (model/lora.py), mapped by the family's weight table
(model/families/tables.py); model/adapters.py stacks what this reads into an Encoder.

A PEFT directory holds adapter_config.json (peft_type LORA, r, lora_alpha, use_rslora, target_modules,
rank_pattern / alpha_pattern, ...) and adapter_model.safetensors, whose keys name the base model's modules:
`base_model.model.<module>.lora_A.weight` (r, I) and `...lora_B.weight` (O, r). <module> is a name of the
transformers model the adapter was trained on (BertModel: encoder.layer.0.attention.self.query; a head class
adds its prefix, bert.encoder...), so it goes through the same table as the checkpoint's weights
(model/families), head prefixes included, onto our projections:

    one of ours        A as is, B · s (s = lora_alpha / r, rsLoRA lora_alpha / √r; rank_pattern and alpha_pattern
                       matched as PEFT matches them: the whole name or a dotted suffix of it)
    fused q/k/v        (ModernBERT's Wqkv) split in three: one shared A, B cut into q, k and v rows
    a part of ours     (the decoders' gate_proj and up_proj, the two halves of our gated ffn.up) joined as one
                       block-diagonal adapter: A's stacked (r_gate + r_up, I), each B in its own rows and columns;
                       a fused target holding both halves (GTE's up_gate_proj) keeps its one A, its B's halves
                       put in our order

    the token embedding  PEFT's embedding LoRA (word_embeddings, embed_tokens: `lora_embedding_A` (r, V),
                       `lora_embedding_B` (D, r)) onto embeddings.token, A as is, B · s: the same pair, with x the
                       one-hot of each id (model.lora.LoRAEmbedding)

The mapping onto our modules (our_pairs) serves model/jina_lora.py too, whose checkpoint (jina-embeddings-v3 as
released) holds its task LoRAs inside its weights rather than in PEFT directories.

Refused, naming the target and what is accepted: targets other than the token embedding and the blocks' attention
and MLP projections (the position and token-type embeddings, norms, heads), modules_to_save, DoRA, bias other than
"none", and the LoRA variants that change the forward (lora_bias, aLoRA, target_parameters, trainable tokens, layer
replication); an adapter whose shapes do not fit the base (another base) is refused when it is placed
(model.adapters).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import Tensor

from model.config_rules import ADAPTER_TARGETS, EMBEDDING_TARGET
from model.families import Family, family_of, full_table
from model.lora import LoRAPair
from model.sentence import read_json
from model.weights import load_weights

CONFIG_NAME, WEIGHTS_NAME = "adapter_config.json", "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
RESERVED = ("base",)  # index 0, the bare base
WHERE = "the token embeddings and the attention and MLP projections"  # what adapters may target, in words
# adapter_config.json settings that change what the adapter computes beyond y += s · (x Aᵀ) Bᵀ: refused when set
UNSUPPORTED = {
    "use_dora": "DoRA (use_dora)", "lora_bias": "a bias on lora_B (lora_bias)",
    "alora_invocation_tokens": "aLoRA (alora_invocation_tokens)", "target_parameters": "target_parameters",
    "trainable_token_indices": "trainable tokens (trainable_token_indices)",
    "layer_replication": "layer_replication", "modules_to_save": "modules_to_save (whole modules trained anew)",
}
# our embedding tables that PEFT can target but this export does not adapt, and what to call them
OTHER_EMBEDDINGS = {"embeddings.position": "the position embeddings", "embeddings.token_type": "the token-type "
                    "embeddings"}
SAVED_TABLE = ".base_layer.weight"  # PEFT's name for a targeted embedding's own table (save_embedding_layers)
# the tensors PEFT saves for one target: a linear layer's, or an embedding's
LINEAR_TENSORS, EMBEDDING_TENSORS = {"lora_A.weight", "lora_B.weight"}, {"lora_embedding_A", "lora_embedding_B"}


class AdapterError(ValueError):
    """A PEFT directory that cannot be served as a LoRA adapter of this base; the message says why."""


@dataclass(frozen=True)
class Adapter:
    """One PEFT directory read onto our modules: pairs by our module name ("blocks.0.attention.q_proj")."""

    name: str
    pairs: dict[str, LoRAPair]
    rank: int  # the largest rank of its pairs
    alpha: float  # lora_alpha
    scaling: float  # lora_alpha / r (rsLoRA: / √r) at the config's r
    use_rslora: bool
    targets: tuple[str, ...]  # our modules ("embeddings.token", "attention.q_proj", "ffn.up", ...)
    source: str | None  # adapter_config.json's base_model_name_or_path
    bytes: int  # float32 bytes of its pairs


def check_names(names: list[str]) -> None:
    """Adapter names: distinct, not "base" (index 0), letters, digits and . _ - (jina's "retrieval.query")."""
    seen = set()
    for name in names:
        if name in seen:
            raise AdapterError(f"adapter name {name!r} is given twice; each adapter needs its own name")
        if name in RESERVED or not NAME.match(name):
            raise AdapterError(f"adapter name {name!r} is not allowed: use letters, digits and . _ - (starting with "
                               f"a letter or digit), and not {', '.join(RESERVED)} (the bare base)")
        seen.add(name)


def read_adapter(name: str, path: Path, source: Path) -> Adapter:
    """The PEFT LoRA directory `path`, for the Hugging Face or sentence-transformers base at `source`."""
    path, source = Path(path), Path(source)
    peft = _read_config(path)
    hf = read_json(source / "config.json") if (source / "config.json").is_file() else {}
    if "model_type" not in hf:
        raise AdapterError(f"adapter {name!r}: PEFT adapters map onto a Hugging Face checkpoint's module names; "
                           f"{source} is not a Hugging Face or sentence-transformers directory")
    family, kind = family_of(hf)
    table = full_table(family, kind, hf)
    by_module = {module: (down, up * _scaling(peft, module, down.shape[0]))  # (r, I), (O, r) with PEFT's scaling
                 for module, (down, up) in _by_module(name, path, source, family, table).items()}
    rank = int(peft.get("r", 8))
    alpha = float(peft.get("lora_alpha", 8))
    rslora = bool(peft.get("use_rslora", False))
    return adapter_of(name, our_pairs(name, by_module, family, table), alpha,
                      alpha / (math.sqrt(rank) if rslora else rank), rslora, peft.get("base_model_name_or_path"))


def our_pairs(name: str, by_module: dict[str, tuple[Tensor, Tensor]], family: Family,
              table: dict[str, Any]) -> dict[str, LoRAPair]:
    """A checkpoint's LoRA, by module name (A (r, I), B (O, r) with the scaling folded in), onto our modules by the
    family's table: each target checked (_target), a fused q/k/v's B cut into its parts over the shared A, parts of
    one of ours joined block-diagonally (block_diagonal)."""
    parts: dict[str, dict[int, LoRAPair]] = {}
    pairs: dict[str, LoRAPair] = {}
    for module, (down, up) in by_module.items():
        target = _target(name, module, family, table)
        split = target if isinstance(target, tuple) else (target,)  # a fused q/k/v: one A, B cut into its parts
        for ours, b in zip(split, up.chunk(len(split)), strict=True):
            if "#" in ours:  # part of one of ours (gate_proj, up_proj; GTE's up_gate_proj holds both)
                module_name, _, index = ours.partition("#")
                parts.setdefault(module_name, {})[int(index)] = LoRAPair(down, b)
            else:
                pairs[ours] = LoRAPair(down, b)
    return pairs | {ours: block_diagonal(by_part, _part_count(table, ours)) for ours, by_part in parts.items()}


def adapter_of(name: str, pairs: dict[str, LoRAPair], alpha: float, scaling: float, use_rslora: bool,
               source: str | None) -> Adapter:
    """The Adapter record of `pairs` (our module -> pair): its rank, targets and bytes counted from them."""
    return Adapter(
        name=name, pairs=pairs, rank=max(p.rank for p in pairs.values()), alpha=alpha, scaling=scaling,
        use_rslora=use_rslora, targets=tuple(sorted({_block_target(m) for m in pairs})), source=source,
        bytes=sum(4 * (p.down.numel() + p.up.numel()) for p in pairs.values()),
    )


def block_diagonal(by_part: dict[int, LoRAPair], count: int) -> LoRAPair:
    """Parts of one of our tensors (equal row counts, joined along its rows in part order), each with its own
    adapter, as one adapter: A's stacked, each B in its part's rows and its own rank's columns; a part without an
    adapter gets zero rows. Parts cut from one fused target (GTE's up_gate_proj) share their A: their B's joined."""
    rows = next(iter(by_part.values())).up.shape[0]
    downs = [by_part[k].down for k in sorted(by_part)]
    if len(by_part) == count and all(d is downs[0] for d in downs):  # one fused target's B rows: A is shared
        return LoRAPair(downs[0], torch.cat([by_part[k].up for k in sorted(by_part)]))  # (count · O_part, r)
    rank = sum(p.rank for p in by_part.values())
    down = torch.cat(downs)  # (r_0 + r_1 + ..., I)
    up = torch.zeros(rows * count, rank)  # (count · O_part, r_0 + r_1 + ...)
    column = 0
    for k in sorted(by_part):
        pair = by_part[k]
        up[k * rows:(k + 1) * rows, column:column + pair.rank] = pair.up
        column += pair.rank
    return LoRAPair(down, up)


def _read_config(path: Path) -> dict[str, Any]:
    if not path.is_dir():
        raise AdapterError(f"adapter directory not found: {path}")
    for file in (CONFIG_NAME, WEIGHTS_NAME):
        if not (path / file).is_file():
            raise AdapterError(f"{path} is not a PEFT LoRA adapter directory: {file} is missing "
                               f"(save_pretrained writes {CONFIG_NAME} and {WEIGHTS_NAME})")
    peft = json.loads((path / CONFIG_NAME).read_text())
    if peft.get("peft_type") != "LORA":
        raise AdapterError(f"{path}: peft_type {peft.get('peft_type')!r} is not supported (LORA only)")
    for key, what in UNSUPPORTED.items():
        if peft.get(key):
            raise AdapterError(f"{path}: {what} is not supported: only plain LoRA on {WHERE} is served "
                               f"({key} = {peft[key]!r})")
    if peft.get("bias", "none") != "none":
        raise AdapterError(f"{path}: bias {peft['bias']!r} is not supported (bias 'none' only: a LoRA that trains "
                           "the base's biases changes the base for every row)")
    return peft


def _by_module(name: str, path: Path, source: Path, family: Family,
               table: dict[str, Any]) -> dict[str, tuple[Tensor, Tensor]]:
    """PEFT module name -> (A (r, I), B (O, r)) in float32. Every module must be one the table maps onto the token
    embedding or a block projection (_target), and hold exactly its pair: a projection's lora_A and lora_B, the
    token embedding's lora_embedding_A (r, V) and lora_embedding_B (D, r) (not a DoRA magnitude, ...). Beside
    them, the token embedding's own table, which PEFT saves for a targeted embed_tokens, when it is the base's."""
    weights = load_file(str(path / WEIGHTS_NAME))
    if not weights:
        raise AdapterError(f"{path / WEIGHTS_NAME} holds no tensors")
    found: dict[str, dict[str, Tensor]] = {}
    for key, value in weights.items():
        module, lora, rest = key.removeprefix(PEFT_PREFIX).partition(".lora_")
        table_of = family.body_name(module.removesuffix(SAVED_TABLE))
        if not lora and module.endswith(SAVED_TABLE) and table.get(table_of) == EMBEDDING_TARGET:
            _check_saved_table(name, key, value, source, family, table_of)
            continue
        if not lora:
            raise AdapterError(f"adapter {name!r}: tensor {key} is not a LoRA tensor; only plain LoRA on {WHERE} is "
                               f"served: {', '.join(_accepted(family))}")
        _target(name, module, family, table)
        found.setdefault(module, {})[f"lora_{rest}"] = value.float()
    return {module: _pair(name, module, ab, table.get(family.body_name(module)) == EMBEDDING_TARGET)
            for module, ab in found.items()}


def _check_saved_table(name: str, key: str, saved: Tensor, source: Path, family: Family, module: str) -> None:
    """PEFT's save_embedding_layers (on by default when embed_tokens is a target) saves the targeted embedding's
    table (base_layer.weight) beside its LoRA, and PeftModel loads it over the base's: served when it is the base's
    table, unchanged (the base's checkpoint is read to compare), refused when it differs (a resized or retrained
    vocabulary changes the base for every row)."""
    base = next((value for k, value in load_weights(source).items() if family.body_name(k) == f"{module}.weight"),
                None)
    if base is None or base.shape != saved.shape or not torch.equal(base.float(), saved.float()):
        raise AdapterError(f"adapter {name!r}: {key} is a token embedding table of its own (PEFT's "
                           "save_embedding_layers), which differs from the base's: an adapter that resizes or "
                           "retrains the vocabulary changes the base for every row and is not served")


def _pair(name: str, module: str, ab: dict[str, Tensor], embedding: bool) -> tuple[Tensor, Tensor]:
    """A module's (A, B): exactly the two tensors PEFT saves for its kind of layer, of one rank."""
    keys = sorted(EMBEDDING_TENSORS if embedding else LINEAR_TENSORS)
    down, up = ab.get(keys[0]), ab.get(keys[1])
    if set(ab) != set(keys) or down is None or up is None or down.shape[0] != up.shape[1]:
        what = "an embedding" if embedding else "a projection"
        raise AdapterError(f"adapter {name!r}: {module} holds {', '.join(sorted(ab))}; plain LoRA on {what} is "
                           f"{keys[0]} (r, in) and {keys[1]} (out, r) of one rank")
    return down, up


def _target(name: str, module: str, family: Family, table: dict[str, Any]) -> str | tuple[str, ...]:
    """Our module(s) for PEFT's `module`, refused unless they are the token embedding or block projections."""
    target = table.get(family.body_name(module))
    accepted = f"adapters are accepted on {WHERE} only: {', '.join(_accepted(family))}"
    if target is None and _dropped(family.body_name(module), family):
        raise AdapterError(f"adapter {name!r} targets {module}, which is not supported (a module this export does "
                           f"not serve); {accepted}")
    if target is None:
        raise AdapterError(f"adapter {name!r} targets {module}, which is not a module of this {family.name} base "
                           f"(an adapter for another base?); {accepted}")
    if target in OTHER_EMBEDDINGS:
        raise AdapterError(f"adapter {name!r} targets {module} ({target} here), which is not supported: LoRA on "
                           f"{OTHER_EMBEDDINGS[target]} is not served (only the token embeddings take an embedding "
                           f"LoRA); {accepted}")
    ours = target if isinstance(target, tuple) else (target,)
    if not all(_block_target(t.partition("#")[0]) in ADAPTER_TARGETS for t in ours):
        raise AdapterError(f"adapter {name!r} targets {module} ({', '.join(ours)} here), which is not supported: "
                           f"{accepted}")
    return target


def _dropped(module: str, family: Family) -> bool:
    """A module of the checkpoint that the loader leaves out: BERT's pooler, another head kind's layers."""
    heads = {key for table in family.heads.values() for key in table}
    return module.startswith(family.ignored) or module in heads


def _accepted(family: Family) -> list[str]:
    """The family's own names of what adapters may target: its token embedding (embeddings.word_embeddings,
    embed_tokens) and its projections (attention.self.query, ..., intermediate.dense)."""
    names = [key for key, value in family.table.items() if value == EMBEDDING_TARGET]
    for key, value in family.table.items():
        ours = value if isinstance(value, tuple) else (value,)
        if "{i}" in key and all(_block_target(t.partition("#")[0].replace("{i}", "0")) in ADAPTER_TARGETS
                                for t in ours):
            names.append(key.split("{i}.", 1)[1])
    return names


def _block_target(ours: str) -> str:
    """"blocks.3.attention.q_proj" -> "attention.q_proj"; anything else ("embeddings.token") as is."""
    parts = ours.split(".")
    return ".".join(parts[2:]) if parts[0] == "blocks" and len(parts) > 2 else ours


def _part_count(table: dict[str, Any], ours: str) -> int:
    return sum(1 for v in table.values() if isinstance(v, str) and v.partition("#")[0] == ours and "#" in v)


def _scaling(peft: dict[str, Any], module: str, rank: int) -> float:
    """PEFT's scaling of `module`: its alpha (alpha_pattern, else lora_alpha) over its rank (rank_pattern, else r;
    the tensors' rank must agree), or over √rank with use_rslora."""
    r = int(_pattern(peft.get("rank_pattern") or {}, module, peft.get("r", 8)))
    alpha = float(_pattern(peft.get("alpha_pattern") or {}, module, peft.get("lora_alpha", 8)))
    if r != rank:
        raise AdapterError(f"{module}: its tensors have rank {rank}, adapter_config.json says {r}")
    return alpha / (math.sqrt(r) if peft.get("use_rslora") else r)


def _pattern(patterns: dict[str, Any], module: str, default: Any) -> Any:
    """PEFT's get_pattern_key: the first pattern that matches the whole module name or a dotted suffix of it."""
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default
