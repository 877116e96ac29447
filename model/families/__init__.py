"""The checkpoint families the loader knows: the registry (one list) and the look-up of a config.json's family.

Encoders (model/families/encoders.py): BERT, RoBERTa, XLM-R, CamemBERT, DistilBERT, MPNet, ModernBERT.
Rotary encoders (model/families/rotary.py): NomicBERT, GTE ("new" GTE, snowflake-arctic-embed-m-v2.0),
jina-embeddings-v3.
Decoders used as encoders (model/families/decoders.py): Llama, Mistral, Qwen2, Qwen3, Gemma3 (text).
Vision transformers (model/families/vision.py): ViT, DINOv2 (with and without registers).
Two-tower models (model/families/towers.py): CLIP's and SigLIP's image and text towers; a CLIPModel or SiglipModel
checkpoint loads one tower at a time (model/towers.py).
The weight-table engine (model/families/tables.py) maps a checkpoint's names onto ours by a family's table.
"""

from __future__ import annotations

from typing import Any

from model.families.base import HEAD_KINDS, Family, Table, activation
from model.families.decoders import DECODERS
from model.families.encoders import ENCODERS
from model.families.rotary import ROTARY
from model.families.tables import expand, full_table, hf_layers, join_parts, place, rename
from model.families.towers import PAIRS, TOWERS
from model.families.vision import VISION

__all__ = ["FAMILIES", "HEAD_KINDS", "Family", "Table", "activation", "expand", "family_of", "full_table", "hf_layers",
           "join_parts", "place", "rename", "supported_classes"]

FAMILIES: tuple[Family, ...] = (*ENCODERS, *ROTARY, *DECODERS, *VISION, *TOWERS)


def supported_classes() -> list[str]:
    """Each class name once (XLMRobertaModel is XLM-R's and, in jina-v3's released config, jina's)."""
    return list(dict.fromkeys([name for f in FAMILIES for name in f.class_names()] + [n for n, _ in PAIRS.values()]))


def family_of(hf: dict[str, Any]) -> tuple[Family, str]:
    """(family, head kind) of a config.json, from its model_type and architectures (a family's released custom-code
    config first, whatever its model_type: jina-embeddings-v3's); a clear error otherwise."""
    model_type = hf.get("model_type")
    if model_type in PAIRS:
        raise ValueError(f"a {PAIRS[model_type][0]} checkpoint holds two towers, an image and a text encoder: load "
                         "one of them (load_model(path, tower='vision' or 'text'); docs/vision.md)")
    family = next((f for f in FAMILIES if f.released is not None and f.released(hf)), None) or next(
        (f for f in FAMILIES if model_type in f.model_types), None)
    if family is None:
        known = ", ".join(t for f in FAMILIES for t in f.model_types)
        raise ValueError(f"model_type {model_type!r} is not supported; supported model types: {known}")
    architecture = (hf.get("architectures") or [f"{family.classes[0]}Model"])[0]
    kinds = family.class_names()
    if architecture in kinds:
        return family, kinds[architecture]
    raise ValueError(f"architecture {architecture!r} is not supported; supported: {', '.join(supported_classes())}")
