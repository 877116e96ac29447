"""Decoders used as encoders: Llama, Mistral, Qwen2, Qwen3 and Gemma3 (text), each its config.json reading and
its weight-name table (model/families/base.py says how tables read).

    family   model_type    classes: {prefix}Model, ...ForSequenceClassification, ...ForCausalLM (body only)
    llama    llama         Llama
    mistral  mistral       Mistral
    qwen2    qwen2         Qwen2
    qwen3    qwen3         Qwen3
    gemma3   gemma3_text   Gemma3Text (and Gemma3ForCausalLM)

They are the encoder's axes set the decoders' way: pre-norm RMS norms, no embedding norm, rotary positions
counted by index (as transformers counts them when no position ids are given), a gated MLP (the checkpoint's
gate_proj and up_proj side by side in our `up`), grouped key/value heads, and the seed's causal mask unless the
config switches it off (is_causal false, or Gemma3's use_bidirectional_attention, as EmbeddingGemma sets it). Qwen3 and
Gemma3 add per-head query/key norms; Gemma3 adds its sandwich norms, its (1 + w) RMS norm, the embedding scale
sqrt(hidden), the query scale 1 / sqrt(query_pre_attn_scalar) and a rotary base per layer type.

A sliding window of W (config.json's sliding_window) lets query i see keys j with 0 <= i - j < W (causal):
window_size W - 1 in our inclusive terms. Gemma3 with bidirectional attention reads W as the window's whole width
(transformers keeps W // 2 + 1 and lets |i - j| < W // 2 + 1 through): window_size W // 2.

A sequence classifier scores the last real token's state with a bias-free `score` layer (transformers picks
the rightmost token that is not the pad id; we pick the last token the attention mask marks real, which is the
same token unless a text holds the pad id itself).
"""

from __future__ import annotations

import math
from typing import Any

from model.families.base import Family, Table, activation, layers, rope_thetas

LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}


def _body(hf: dict[str, Any], architecture: str) -> dict[str, Any]:
    """The fields every decoder family names alike."""
    heads = hf["num_attention_heads"]
    global_theta, local_theta = rope_thetas(hf, 10_000.0)
    types = _layer_types(hf)
    return dict(
        architecture=architecture, vocab_size=hf["vocab_size"], d_model=hf["hidden_size"], num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_size=hf.get("head_dim") or hf["hidden_size"] // heads, num_layers=hf["num_hidden_layers"],
        d_ff=hf["intermediate_size"], max_length=hf.get("max_position_embeddings", 2048), dropout=0.0,
        attention_dropout=hf.get("attention_dropout", 0.0), pad_token_id=hf.get("pad_token_id") or 0,
        layer_norm_eps=hf.get("rms_norm_eps", 1e-6), norm_kind="rms", norm_position="pre", embedding_norm=False,
        position_embedding="none", type_vocab_size=0, activation=activation(hf.get("hidden_act", "silu")),
        gated_ffn=True, attention_bias=hf.get("attention_bias", False), ffn_bias=hf.get("mlp_bias", False),
        mask_kind="full" if _bidirectional(hf) else "causal", rotary_theta=global_theta,
        rotary_local_theta=local_theta, layer_types=types, window_size=_window(hf, types), pooling="lasttoken",
        head_dropout=0.0,
    )


def _bidirectional(hf: dict[str, Any]) -> bool:
    """transformers' switches: is_causal false for any decoder, use_bidirectional_attention for Gemma3 (other
    families' transformers code ignores that key, so it is ignored here too)."""
    return hf.get("is_causal") is False or _gemma_bidirectional(hf)


def _gemma_bidirectional(hf: dict[str, Any]) -> bool:
    return hf.get("model_type") == "gemma3_text" and bool(hf.get("use_bidirectional_attention"))


def _layer_types(hf: dict[str, Any]) -> tuple[str, ...]:
    """full / sliding per layer: the config's layer_types (transformers 5 writes them out), else as the family's
    older configs say (Mistral: every layer when sliding_window is set; Qwen: layers from max_window_layers on
    when use_sliding_window; Gemma3: all but every sliding_window_pattern-th)."""
    n = hf["num_hidden_layers"]
    if hf.get("layer_types"):
        unknown = set(hf["layer_types"]) - set(LAYER_TYPES)
        if unknown:
            raise ValueError(f"layer_types {sorted(unknown)} are not supported; supported: {', '.join(LAYER_TYPES)}")
        return tuple(LAYER_TYPES[t] for t in hf["layer_types"])
    if hf.get("model_type") == "gemma3_text":
        pattern = hf.get("sliding_window_pattern", 6)
        return tuple("full" if (i + 1) % pattern == 0 else "sliding" for i in range(n))
    if hf.get("model_type") in ("qwen2", "qwen3"):
        start = hf.get("max_window_layers", n) if hf.get("use_sliding_window") and hf.get("sliding_window") else n
        return tuple("sliding" if i >= start else "full" for i in range(n))
    return ("sliding" if hf.get("sliding_window") else "full",) * n


def _window(hf: dict[str, Any], types: tuple[str, ...]) -> int:
    """The sliding layers' reach in our inclusive terms (module docstring): W - 1 back under the causal mask; W each
    side with is_causal false (transformers' bidirectional window, |i - j| <= W); Gemma3's bidirectional switch keeps
    W // 2 + 1 and lets |i - j| < W // 2 + 1 through, i.e. W // 2, or W // 2 + 1 with is_causal false too."""
    if "sliding" not in types:
        return 0
    window = int(hf.get("sliding_window") or 0)
    if window < 2:
        raise ValueError(f"sliding_window {hf.get('sliding_window')} is not supported: a sliding layer needs 2 or more")
    if _gemma_bidirectional(hf):
        window = window // 2 + 1
    return window if hf.get("is_causal") is False else window - 1


def _llama_body(hf: dict[str, Any]) -> dict[str, Any]:
    return _body(hf, "llama")


def _mistral_body(hf: dict[str, Any]) -> dict[str, Any]:
    return {**_body(hf, "mistral"), "attention_bias": False, "ffn_bias": False}


def _qwen2_body(hf: dict[str, Any]) -> dict[str, Any]:
    """Qwen2's q, k and v projections always carry a bias, its output projection and MLP never do."""
    return {**_body(hf, "qwen2"), "attention_bias": True, "attention_out_bias": False, "ffn_bias": False}


def _qwen3_body(hf: dict[str, Any]) -> dict[str, Any]:
    return {**_body(hf, "qwen3"), "qk_norm": True, "ffn_bias": False}


def _gemma3_body(hf: dict[str, Any]) -> dict[str, Any]:
    if hf.get("attn_logit_softcapping") is not None or hf.get("final_logit_softcapping") is not None:
        raise ValueError("Gemma logit soft-capping is not supported (Gemma3 has none; Gemma2 does)")
    thetas = rope_thetas(hf, 1_000_000.0, 10_000.0)
    return {
        **_body(hf, "gemma3"), "activation": activation(hf.get("hidden_activation", "gelu_pytorch_tanh")),
        "norm_kind": "rms_one_plus", "norm_position": "sandwich", "qk_norm": True, "ffn_bias": False,
        "embedding_scale": math.sqrt(hf["hidden_size"]), "query_pre_attn_scalar": float(hf["query_pre_attn_scalar"]),
        "rotary_theta": thetas[0], "rotary_local_theta": thetas[1],
        "max_length": hf.get("max_position_embeddings", 32_768),
    }


def _head(hf: dict[str, Any], kind: str) -> dict[str, Any]:
    """A sequence classifier: a bias-free linear layer on the last real token's state (the pooled embedding)."""
    return {"sequence": dict(head="linear", head_bias=False)}.get(kind, {})


_ATTENTION = {
    "self_attn.q_proj": "attention.q_proj", "self_attn.k_proj": "attention.k_proj",
    "self_attn.v_proj": "attention.v_proj", "self_attn.o_proj": "attention.out_proj",
    "self_attn.q_norm": "attention.q_norm", "self_attn.k_norm": "attention.k_norm",
    "mlp.gate_proj": "ffn.up#0", "mlp.up_proj": "ffn.up#1", "mlp.down_proj": "ffn.down",
    "input_layernorm": "attn_norm",
}
_DECODER: Table = {"embed_tokens": "embeddings.token", "norm": "final_norm",
                   **layers("layers.{i}.", {**_ATTENTION, "post_attention_layernorm": "ffn_norm"})}
_GEMMA3: Table = {"embed_tokens": "embeddings.token", "norm": "final_norm", **layers("layers.{i}.", {
    **_ATTENTION, "post_attention_layernorm": "attn_post_norm", "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "ffn_post_norm"})}
_HEADS: dict[str, Table] = {"sequence": {"score": "head.classifier"}, "lm": {}}
_GEMMA3_HEADS: dict[str, Table] = {"sequence": _HEADS["sequence"]}
_IGNORED = ("lm_head.",)

LLAMA = Family("llama", ("llama",), ("Llama",), "model.", _llama_body, _DECODER, _HEADS, _head, _IGNORED)
MISTRAL = Family("mistral", ("mistral",), ("Mistral",), "model.", _mistral_body, _DECODER, _HEADS, _head, _IGNORED)
QWEN2 = Family("qwen2", ("qwen2",), ("Qwen2",), "model.", _qwen2_body, _DECODER, _HEADS, _head, _IGNORED)
QWEN3 = Family("qwen3", ("qwen3",), ("Qwen3",), "model.", _qwen3_body, _DECODER, _HEADS, _head, _IGNORED)
GEMMA3 = Family("gemma3", ("gemma3_text",), ("Gemma3Text",), "model.", _gemma3_body, _GEMMA3, _GEMMA3_HEADS,
                _head, _IGNORED, aliases={"Gemma3ForCausalLM": "lm"})
DECODERS = (LLAMA, MISTRAL, QWEN2, QWEN3, GEMMA3)
