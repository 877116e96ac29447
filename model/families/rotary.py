"""The rotary encoder families, as transformers' native classes write them: NomicBERT (nomic-embed-text-v1.5),
GTE (the "new" GTE: gte-multilingual-base, gte-*-v1.5, snowflake-arctic-embed-m-v2.0) and jina-embeddings-v3, each
its config.json reading and its weight-name table (model/families/base.py says how tables read).

    family      model_type           classes: {prefix}Model, ...ForSequenceClassification,
                                     ...ForTokenClassification, ...ForMaskedLM
    nomicbert   nomic_bert           NomicBert
    gte         gte                  Gte
    jina        jina_embeddings_v3   JinaEmbeddingsV3

All three are BERT's post-norm block (a LayerNorm after each residual, one over the token and token-type
embeddings) with rotary q and k in place of a position table: the rotate-half layout, positions counted by index
from 0 (as transformers counts them when no position ids are given, so left padding shifts them as it does there).
They differ on the encoder's axes:

    NomicBERT  SwiGLU (gate_proj and up_proj side by side in our `up`), no bias on any projection (the LayerNorms
               keep theirs), theta 1000 unless the config says; its sequence classifier is BERT's (tanh pooler
               on [CLS], then a linear layer)
    GTE        a gated MLP with no bias on gate_proj and up_proj but one on down_proj (ffn_down_bias), biased q, k,
               v and o, theta 160000; BERT's sequence classifier. The released checkpoints' static NTK scaling is a
               "linear" rope type in transformers (theta already scaled, every frequency / factor)
    jina-v3    XLM-R with rotary: a GELU MLP (fc1, fc2), biases everywhere, theta 20000, pad id 1; XLM-R's
               classification head (dense, tanh, out_proj on <s>). Its task LoRA adapters are no part of the body.
               Its released repository (jinaai/jina-embeddings-v3, custom code) says model_type xlm-roberta with
               position_embedding_type rotary, rotary_emb_base and lora_adaptations: `jina_released` claims that
               config.json for this family (rotary_emb_base read as rope_theta), and model/jina_lora.py reads its
               weights, whose task LoRAs are inside them, into adapters named after the tasks.

Rotary scaling (rope_type default, linear or dynamic: model/positions.py) comes from base.rope_scaling; other rope
types are refused. Each table maps both transformers' module names and the released checkpoints' own (nomic's
Wqkv, fc11 / fc12 and norm1 / norm2; GTE's qkv_proj and up_gate_proj, up before gate; jina's mixer.Wqkv), which
transformers renames on load and writes back when it saves. NomicBERT's config.json is read in nomic's custom-code
names too (n_embd, n_head, n_layer, n_inner, rotary_emb_base: nomic-embed-text-v1.5's) where transformers' are absent,
and GTE's in Alibaba's (model_type new, rope_theta with static NTK rope_scaling: new_names).
The masked-LM heads are BERT's transform (dense, activation, LayerNorm) and a decoder tied to the token embeddings:
NomicBERT's activation is its hidden_act, GTE's and jina's LM heads call exact GELU.
"""

from __future__ import annotations

from typing import Any

from model.families.base import Family, Table, activation, layers, rope_scaling, rope_thetas


def _body(hf: dict[str, Any], architecture: str, theta: float, pad_token_id: int) -> dict[str, Any]:
    """The fields the three families name alike (BERT's names), with rotary positions."""
    heads = hf["num_attention_heads"]
    global_theta, _ = rope_thetas(hf, theta, scaled=True)
    scaling = rope_scaling(hf)
    positions = hf.get("max_position_embeddings", 512)
    return dict(
        architecture=architecture, vocab_size=hf["vocab_size"], d_model=hf["hidden_size"], num_heads=heads,
        head_size=hf.get("head_dim") or 0, num_layers=hf["num_hidden_layers"], d_ff=hf["intermediate_size"],
        # dynamic scaling is there to reach past max_position_embeddings: up to factor times as far
        max_length=int(positions * scaling["rotary_factor"]) if scaling["rotary_scaling"] == "dynamic" else positions,
        dropout=hf.get("hidden_dropout_prob", 0.1), attention_dropout=hf.get("attention_probs_dropout_prob", 0.0),
        pad_token_id=pad_token_id if hf.get("pad_token_id") is None else hf["pad_token_id"],
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12), activation=activation(hf.get("hidden_act", "gelu")),
        type_vocab_size=hf.get("type_vocab_size", 1), position_embedding="none", rotary_theta=global_theta,
        head_dropout=hf.get("classifier_dropout") or hf.get("hidden_dropout_prob", 0.1), **scaling,
    )


# nomic-ai/nomic-bert-2048's custom-code config.json (the released nomic-embed repositories): GPT-2 style names for
# transformers' own, and switches its code has that transformers' NomicBert (and ours) keep at one value
_NOMIC_NAMES = {"n_embd": "hidden_size", "n_head": "num_attention_heads", "n_layer": "num_hidden_layers",
                "n_inner": "intermediate_size", "n_positions": "max_position_embeddings",
                "layer_norm_epsilon": "layer_norm_eps", "rotary_emb_base": "rope_theta"}
_NOMIC_FIXED = {"activation_function": "swiglu", "rotary_emb_fraction": 1.0, "rotary_emb_interleaved": False,
                "rotary_scaling_factor": None, "prenorm": False, "causal": False, "qkv_proj_bias": False,
                "mlp_fc1_bias": False, "mlp_fc2_bias": False}


def _refuse_other_values(hf: dict[str, Any], fixed: dict[str, Any], model_type: str, who: str) -> None:
    """A custom-code switch set to anything but what its released checkpoints (`who`) set, refused by name."""
    for key, value in fixed.items():
        if key in hf and hf[key] != value:
            raise ValueError(f"{model_type} {key} {hf[key]!r} is not supported (only {value!r}, as {who} sets it)")


def nomic_names(hf: dict[str, Any]) -> dict[str, Any]:
    """A NomicBERT config.json in transformers' names: the custom code's names read where transformers' are absent
    (n_inner null: 4 * n_embd, as its code); a switch set to what its code alone implements is refused."""
    _refuse_other_values(hf, _NOMIC_FIXED, "nomic_bert", "nomic-embed")
    renamed = {ours: hf[theirs] for theirs, ours in _NOMIC_NAMES.items() if theirs in hf and ours not in hf}
    if "n_embd" in hf and renamed.get("intermediate_size", 0) is None:
        renamed["intermediate_size"] = 4 * hf["n_embd"]
    return {**hf, **renamed}


def _nomic_body(hf: dict[str, Any]) -> dict[str, Any]:
    hf = nomic_names(hf)
    return {**_body(hf, "nomicbert", 1000.0, 0), "activation": activation(hf.get("hidden_act", "silu")),
            "type_vocab_size": hf.get("type_vocab_size", 2), "gated_ffn": True, "attention_bias": False,
            "ffn_bias": False}


# Alibaba's "new" config.json (custom code, Alibaba-NLP/new-impl: gte-multilingual-base, gte-*-v1.5): switches its
# code has that transformers' Gte (and ours) keep at one value, each with the value the released checkpoints set
_NEW_FIXED = {"position_embedding_type": "rope", "layer_norm_type": "layer_norm", "pack_qkv": True,
              "logn_attention_scale": False, "logn_attention_clip1": False}


def new_names(hf: dict[str, Any]) -> dict[str, Any]:
    """An Alibaba "new" config.json as transformers' Gte reads its converted checkpoints. new-impl's static NTK
    scaling ({"type": "ntk", "factor": f}, no mixed_b) computes every inverse frequency from the base theta * f, then
    divides it by f ** (2 / head_dim): transformers' linear rope type with theta * f and that factor (which is how
    the native gte conversions write it). Mixed NTK (mixed_b) and the switches above at other values are refused."""
    if hf.get("model_type") != "new":
        return hf
    _refuse_other_values(hf, _NEW_FIXED, "new", "gte-multilingual-base")
    theta, scaling = float(hf.get("rope_theta", 10_000.0)), hf.get("rope_scaling") or {}
    if not scaling:
        return {**hf, "rope_parameters": {"rope_type": "default", "rope_theta": theta}}
    if scaling.get("type") != "ntk" or scaling.get("mixed_b") is not None:
        raise ValueError(f"new rope_scaling {scaling!r} is not supported (static NTK only: type ntk, no mixed_b)")
    factor, head_size = float(scaling["factor"]), hf["hidden_size"] // hf["num_attention_heads"]
    rope = {"rope_type": "linear", "rope_theta": theta * factor, "factor": factor ** (2 / head_size)}
    return {**{k: v for k, v in hf.items() if k != "rope_scaling"}, "rope_parameters": rope}


def _gte_body(hf: dict[str, Any]) -> dict[str, Any]:
    hf = new_names(hf)
    return {**_body(hf, "gte", 160_000.0, 1), "gated_ffn": True, "ffn_bias": False, "ffn_down_bias": True}


def jina_released(hf: dict[str, Any]) -> bool:
    """Whether config.json is jina-embeddings-v3's released custom-code one (jinaai/xlm-roberta-flash-implementation
    with its task LoRAs): model_type xlm-roberta, rotary positions, lora_adaptations. An xlm-roberta config with
    rotary positions and no tasks is another model of that code, left to XLM-R's reader (which refuses it)."""
    return (hf.get("model_type") == "xlm-roberta" and hf.get("position_embedding_type") == "rotary"
            and "lora_adaptations" in hf)


def jina_names(hf: dict[str, Any]) -> dict[str, Any]:
    """A jina config.json with the custom code's rotary_emb_base read as rope_theta where transformers' rope fields
    are absent (the released config's only body field under another name)."""
    if "rotary_emb_base" in hf and "rope_theta" not in hf and "rope_parameters" not in hf:
        return {**hf, "rope_theta": hf["rotary_emb_base"]}
    return hf


def _jina_body(hf: dict[str, Any]) -> dict[str, Any]:
    hf = jina_names(hf)
    return {**_body(hf, "jina", 20_000.0, 1), "layer_norm_eps": hf.get("layer_norm_eps", 1e-5)}


def _head(lm_activation: str | None) -> Any:
    """A family's head fields: a tanh pooler (NomicBERT's and GTE's BertPooler, jina's classifier dense) before
    the sequence classifier; the MLM transform's activation (None: the hidden activation)."""
    def head_config(hf: dict[str, Any], kind: str) -> dict[str, Any]:
        mlm_activation = lm_activation or activation(hf.get("hidden_act", "silu"))
        return {"sequence": dict(head="pooler", head_activation="tanh"), "tokens": dict(head="tokens"),
                "mlm": dict(head="mlm", head_activation=mlm_activation, head_norm=True,
                            tie_decoder=hf.get("tie_word_embeddings", True))}.get(kind, {})
    return head_config


# transformers' own module names (what its classes hold, and what a checkpoint saved in that layout holds)
_NATIVE = {"self_attn.q_proj": "attention.q_proj", "self_attn.k_proj": "attention.k_proj",
           "self_attn.v_proj": "attention.v_proj", "self_attn.o_proj": "attention.out_proj",
           "post_attention_layernorm": "attn_norm", "post_mlp_layernorm": "ffn_norm"}
_NATIVE_GATED = {"mlp.gate_proj": "ffn.up#0", "mlp.up_proj": "ffn.up#1", "mlp.down_proj": "ffn.down"}
_NATIVE_EMBEDDINGS: Table = {"embeddings.word_embeddings": "embeddings.token",
                             "embeddings.token_type_embeddings": "embeddings.token_type",
                             "embeddings.LayerNorm": "embeddings.norm"}
_QKV = ("attention.q_proj", "attention.k_proj", "attention.v_proj")
# the released checkpoints' names, which transformers renames on load (conversion_mapping.py) and writes back on save
_NOMIC: Table = {"emb_ln": "embeddings.norm", **layers("encoder.layers.{i}.", {
    "attn.Wqkv": _QKV, "attn.out_proj": "attention.out_proj", "mlp.fc12": "ffn.up#0", "mlp.fc11": "ffn.up#1",
    "mlp.fc2": "ffn.down", "norm1": "attn_norm", "norm2": "ffn_norm"})}
_GTE: Table = layers("encoder.layer.{i}.", {
    "attention.qkv_proj": _QKV, "attention.o_proj": "attention.out_proj", "attn_ln": "attn_norm",
    "mlp.up_gate_proj": ("ffn.up#1", "ffn.up#0"), "mlp.down_proj": "ffn.down", "mlp_ln": "ffn_norm"})
_JINA: Table = {"emb_ln": "embeddings.norm", **layers("encoder.layers.{i}.", {
    "mixer.Wqkv": _QKV, "mixer.out_proj": "attention.out_proj", "mlp.fc1": "ffn.up", "mlp.fc2": "ffn.down",
    "norm1": "attn_norm", "norm2": "ffn_norm"})}
_BERT_SEQUENCE: Table = {"pooler.dense": "head.pooler", "classifier": "head.classifier"}
_TOKENS: Table = {"classifier": "head.classifier"}
_LM_HEAD: Table = {"lm_head.dense": "head.transform", "lm_head.layer_norm": "head.transform.norm",
                   "lm_head.norm": "head.transform.norm", "lm_head.decoder": "head.decoder",
                   "lm_head.bias": "head.decoder.bias"}

NOMIC_BERT = Family(
    "nomicbert", ("nomic_bert",), ("NomicBert",), "nomic_bert.", _nomic_body,
    {**_NATIVE_EMBEDDINGS, **layers("layers.{i}.", {**_NATIVE, **_NATIVE_GATED}), **_NOMIC},
    heads={"sequence": _BERT_SEQUENCE, "tokens": _TOKENS,
           "mlm": {"cls.predictions.transform.dense": "head.transform",
                   "cls.predictions.transform.layer_norm": "head.transform.norm",
                   "cls.predictions.decoder": "head.decoder", "cls.predictions.bias": "head.decoder.bias"}},
    head_config=_head(None), ignored=("pooler.",),
)
GTE = Family(
    "gte", ("gte", "new"), ("Gte", "New"), "gte.", _gte_body,
    {**_NATIVE_EMBEDDINGS, **layers("layers.{i}.", {**_NATIVE, **_NATIVE_GATED}), **_GTE},
    heads={"sequence": _BERT_SEQUENCE, "tokens": _TOKENS, "mlm": _LM_HEAD}, head_config=_head("gelu"),
    ignored=("pooler.",), other_prefixes=("new.",),  # Alibaba's NewFor... classes keep the body under new.
)
JINA_V3 = Family(
    "jina", ("jina_embeddings_v3",), ("JinaEmbeddingsV3",), "roberta.", _jina_body,
    {**_NATIVE_EMBEDDINGS, **layers("layers.{i}.", {**_NATIVE, "mlp.fc1": "ffn.up", "mlp.fc2": "ffn.down"}), **_JINA},
    heads={"sequence": {"classifier.dense": "head.pooler", "classifier.out_proj": "head.classifier"},
           "tokens": _TOKENS, "mlm": _LM_HEAD},
    head_config=_head("gelu"), ignored=("pooler.",),
    aliases={"XLMRobertaModel": "none"}, released=jina_released,  # the released config's class: the bare body
)
ROTARY = (NOMIC_BERT, GTE, JINA_V3)
