"""What every family is made of: a Family record, its weight-name table, and the config readers they share.

A family is the encoder's axes set one way (model/config.py) and one table that maps the checkpoint's
parameter names onto ours. Table keys are module names (a parameter's name without .weight/.bias) or,
where a checkpoint keeps a lone parameter, full parameter names; "{i}" stands for the layer index. A
tuple value splits the checkpoint's tensor along its first axis into equal parts (ModernBERT's fused
Wqkv); a value ending in "#k" is part k of one of our tensors that several checkpoint tensors make,
joined along the first axis in the order of k (the decoders' gate_proj and up_proj, one gated `up`).
Each head kind of a family adds its own small table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from model.config_rules import ROTARY_SCALINGS

Table = dict[str, str | tuple[str, ...]]
# class-name suffix -> head kind; "lm" (a causal LM) loads its body only: the language-model head is not served
HEAD_KINDS = {"Model": "none", "ForSequenceClassification": "sequence", "ForTokenClassification": "tokens",
              "ForMaskedLM": "mlm", "ForCausalLM": "lm", "ForImageClassification": "image",
              "ModelWithProjection": "projection"}
# transformers' activation names -> ours (model.layers.activate); gelu_new and gelu_fast are the tanh formula
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
               "quick_gelu": "quick_gelu", "relu": "relu", "silu": "silu", "swish": "silu", "tanh": "tanh"}


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]
    classes: tuple[str, ...]  # class-name prefixes, e.g. "XLMRoberta"
    prefix: str  # the body's prefix inside a head class's weights, e.g. "roberta."
    config: Callable[[dict[str, Any]], dict[str, Any]]  # config.json -> EncoderConfig fields of the body
    table: Table
    heads: dict[str, Table]  # head kind -> table; the kinds the family loads, besides the bare model
    head_config: Callable[[dict[str, Any], str], dict[str, Any]]  # (config.json, head kind) -> head fields
    ignored: tuple[str, ...] = field(default=())  # checkpoint names we do not use (e.g. BERT's pooler)
    aliases: dict[str, str] = field(default_factory=dict)  # other class names -> head kind (Gemma3ForCausalLM)
    other_prefixes: tuple[str, ...] = field(default=())  # the body's prefix in older checkpoints (GTE's "new.")
    modality: str = "text"  # "vision": reads pixel values, has no tokenizer (model/vision.py)
    # our tensors the checkpoint keeps without the leading (1, ...) axes (CLIP's (D,) class embedding, an Embedding's
    # (N, D) position table): read as (1, -1, D)
    flat: tuple[str, ...] = field(default=())
    pair: str = ""  # a tower of a two-tower model (model/towers.py): that model's model_type ("clip", "siglip")
    # a released custom-code config.json the family reads though its model_type is another family's (jina-v3's
    # xlm-roberta with rotary positions and task LoRAs): family_of asks it before the model_type
    released: Callable[[dict[str, Any]], bool] | None = None

    def body_name(self, key: str) -> str:
        """A checkpoint tensor's name without the body's prefix (a head class's), whichever of the family's it is."""
        prefix = next((p for p in (self.prefix, *self.other_prefixes) if key.startswith(p)), "")
        return key[len(prefix):]

    def class_names(self) -> dict[str, str]:
        """The transformers classes this family loads, each with its head kind: BertModel -> none, ..."""
        kinds = {"none", *self.heads}
        named = {f"{prefix}{suffix}": kind for prefix in self.classes for suffix, kind in HEAD_KINDS.items()
                 if kind in kinds}
        return {**named, **self.aliases}


def activation(name: str) -> str:
    if name not in ACTIVATIONS:
        raise ValueError(f"activation {name!r} is not supported; supported: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def layers(source: str, table: Table) -> Table:
    """Per-layer names under `source` (e.g. "encoder.layer.{i}.") mapped under ours ("blocks.{i}.")."""
    return {f"{source}{k}": f"blocks.{{i}}.{v}" if isinstance(v, str) else tuple(f"blocks.{{i}}.{p}" for p in v)
            for k, v in table.items()}


def rope_thetas(hf: dict[str, Any], global_default: float, local_default: float | None = None,
                global_key: str = "rope_theta", local_key: str = "rope_local_base_freq",
                scaled: bool = False) -> tuple[float, float]:
    """(global, local) rotary theta from transformers 5's rope_parameters (flat, or one entry per layer type) or
    the original checkpoints' keys. Without `scaled` only the default rotary (no scaling) is accepted; with it,
    the rope types rope_scaling reads too (the caller then applies rope_scaling's fields). Any other is refused."""
    rope = hf.get("rope_parameters") or {}
    for kind in _rope_kinds(hf):
        rope_type = _rope_type(kind)
        if rope_type != "default" and not (scaled and rope_type in ROTARY_SCALINGS):
            supported = ", ".join(ROTARY_SCALINGS if scaled else ("default",))
            raise ValueError(f"rope_type {rope_type!r} is not supported; supported: {supported}")
    if float(hf.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError(f"partial_rotary_factor {hf['partial_rotary_factor']} is not supported (full rotary only)")
    flat = rope if "rope_theta" in rope else {}
    global_theta = (rope.get("full_attention") or flat).get("rope_theta", hf.get(global_key, global_default))
    local_fallback = hf.get(local_key, global_theta if local_default is None else local_default)
    local_theta = (rope.get("sliding_attention") or flat).get("rope_theta", local_fallback)
    return float(global_theta), float(local_theta)


def rope_scaling(hf: dict[str, Any]) -> dict[str, Any]:
    """EncoderConfig's rotary scaling fields (rotary_scaling, rotary_factor, rotary_original_length) from the rope
    parameters (or the legacy rope_scaling), as transformers' ROPE_INIT_FUNCTIONS read them: linear and dynamic take
    `factor`, dynamic grows past max_position_embeddings. One scaling for every layer: per-layer-type parameters
    that scale differently are refused, as is any rope type but default, linear and dynamic."""
    kinds = _rope_kinds(hf)
    types = {_rope_type(kind) for kind in kinds}
    if len(types) > 1 or len({float(kind.get("factor", 1.0)) for kind in kinds if _rope_type(kind) != "default"}) > 1:
        raise ValueError(f"rope parameters that scale the layer types differently are not supported: {kinds}")
    rope_type = types.pop() if types else "default"
    if rope_type not in ROTARY_SCALINGS:
        raise ValueError(f"rope_type {rope_type!r} is not supported; supported: {', '.join(ROTARY_SCALINGS)}")
    if rope_type == "default":
        return dict(rotary_scaling="default", rotary_factor=1.0, rotary_original_length=0)
    factor = next((float(kind["factor"]) for kind in kinds if "factor" in kind), None)
    if factor is None:
        raise ValueError(f"rope_type {rope_type!r} needs a factor; the rope parameters have none: {kinds}")
    original = int(hf.get("max_position_embeddings", 0)) if rope_type == "dynamic" else 0
    return dict(rotary_scaling=rope_type, rotary_factor=factor, rotary_original_length=original)


def _rope_kinds(hf: dict[str, Any]) -> list[dict[str, Any]]:
    """The rope parameter dicts that apply: the flat rope_parameters or one per layer type, and a legacy
    rope_scaling (transformers 4) when there is one."""
    rope = hf.get("rope_parameters") or {}
    kinds = [rope] if "rope_theta" in rope or "rope_type" in rope else [v or {} for v in rope.values()]
    legacy = hf.get("rope_scaling") or {}
    return [kind for kind in [*kinds, legacy] if kind]


def _rope_type(kind: dict[str, Any]) -> str:
    return str(kind.get("rope_type", kind.get("type", "default")))
