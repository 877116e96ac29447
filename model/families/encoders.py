"""The encoder families: BERT, RoBERTa (XLM-R, CamemBERT), DistilBERT, MPNet and ModernBERT, each its
config.json reading and its weight-name table (model/families/base.py says how tables read).

    family      model_type (config.json)             classes: {prefix}Model, ...ForSequenceClassification,
                                                      ...ForTokenClassification, ...ForMaskedLM
    bert        bert                                  Bert
    roberta     roberta, xlm-roberta, camembert       Roberta, XLMRoberta, Camembert
    distilbert  distilbert                            DistilBert
    mpnet       mpnet                                 MPNet
    modernbert  modernbert                            ModernBert
"""

from __future__ import annotations

from typing import Any

from model.families.base import Family, Table, activation, layers, rope_thetas


def _bert_body(hf: dict[str, Any]) -> dict[str, Any]:
    """The fields BERT, RoBERTa and MPNet name alike."""
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"position_embedding_type {hf['position_embedding_type']!r} is not supported (absolute only)")
    return dict(
        vocab_size=hf["vocab_size"], d_model=hf["hidden_size"], num_heads=hf["num_attention_heads"],
        num_layers=hf["num_hidden_layers"], d_ff=hf["intermediate_size"],
        max_length=hf.get("max_position_embeddings", 512), dropout=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.1), pad_token_id=hf.get("pad_token_id") or 0,
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12), activation=activation(hf.get("hidden_act", "gelu")),
        type_vocab_size=hf.get("type_vocab_size", 2),
        head_dropout=hf.get("classifier_dropout") or hf.get("hidden_dropout_prob", 0.1),
    )


def _roberta_body(hf: dict[str, Any]) -> dict[str, Any]:
    return {**_bert_body(hf), "architecture": "roberta", "position_embedding": "fairseq",
            "pad_token_id": hf.get("pad_token_id", 1), "type_vocab_size": hf.get("type_vocab_size", 1)}


def _mpnet_body(hf: dict[str, Any]) -> dict[str, Any]:
    if hf.get("relative_attention_num_buckets", 32) != 32:
        raise ValueError("MPNet's relative buckets are computed for 32 buckets; "
                         f"relative_attention_num_buckets {hf['relative_attention_num_buckets']} is not supported")
    return {**_bert_body(hf), "architecture": "mpnet", "position_embedding": "fairseq", "type_vocab_size": 0,
            "pad_token_id": 1, "relative_attention_buckets": 32}  # MPNetEmbeddings' padding_idx is always 1


def _distilbert_body(hf: dict[str, Any]) -> dict[str, Any]:
    return dict(
        architecture="distilbert", vocab_size=hf["vocab_size"], d_model=hf["dim"], num_heads=hf["n_heads"],
        num_layers=hf["n_layers"], d_ff=hf["hidden_dim"], max_length=hf.get("max_position_embeddings", 512),
        dropout=hf.get("dropout", 0.1), attention_dropout=hf.get("attention_dropout", 0.1),
        pad_token_id=hf.get("pad_token_id") or 0, layer_norm_eps=1e-12, type_vocab_size=0,
        activation=activation(hf.get("activation", "gelu")), head_dropout=hf.get("seq_classif_dropout", 0.2),
    )


def _bert_head(hf: dict[str, Any], kind: str) -> dict[str, Any]:
    """BERT, RoBERTa, MPNet: tanh pooler/classification dense; the MLM transform uses the hidden activation
    (RoBERTa's and MPNet's LM heads call exact gelu, which is what their configs say)."""
    return {"sequence": dict(head="pooler", head_activation="tanh"), "tokens": dict(head="tokens"),
            "mlm": dict(head="mlm", head_activation=activation(hf.get("hidden_act", "gelu")), head_norm=True,
                        tie_decoder=hf.get("tie_word_embeddings", True))}.get(kind, {})


def _distilbert_head(hf: dict[str, Any], kind: str) -> dict[str, Any]:
    return {"sequence": dict(head="pooler", head_activation="relu"), "tokens": dict(head="tokens"),
            "mlm": dict(head="mlm", head_activation=activation(hf.get("activation", "gelu")), head_norm=True,
                        tie_decoder=hf.get("tie_word_embeddings", True))}.get(kind, {})


def _modernbert_body(hf: dict[str, Any]) -> dict[str, Any]:
    every = hf.get("global_attn_every_n_layers", 3)
    _check_layer_types(hf, every)
    global_theta, local_theta = rope_thetas(hf, 160_000.0, 10_000.0, local_key="local_rope_theta",
                                             global_key="global_rope_theta")
    return dict(
        architecture="modernbert", vocab_size=hf["vocab_size"], d_model=hf["hidden_size"],
        num_heads=hf["num_attention_heads"], num_layers=hf["num_hidden_layers"], d_ff=hf["intermediate_size"],
        max_length=hf.get("max_position_embeddings", 8192), dropout=hf.get("mlp_dropout", 0.0),
        attention_dropout=hf.get("attention_dropout", 0.0), pad_token_id=hf.get("pad_token_id") or 0,
        layer_norm_eps=hf.get("norm_eps", 1e-5), norm_bias=hf.get("norm_bias", False),
        activation=activation(hf.get("hidden_activation", "gelu")), gated_ffn=True,
        attention_bias=hf.get("attention_bias", False), ffn_bias=hf.get("mlp_bias", False),
        norm_position="pre", first_attn_norm=False, position_embedding="none", type_vocab_size=0,
        rotary_theta=global_theta, rotary_local_theta=local_theta, global_attn_every=every,
        window_size=hf.get("local_attention", 128) // 2, head_dropout=hf.get("classifier_dropout", 0.0),
    )


def _check_layer_types(hf: dict[str, Any], every: int) -> None:
    """transformers 5 writes the pattern out as layer_types; it must be the every-n-th-global one."""
    expected = ["sliding_attention" if i % every else "full_attention" for i in range(hf["num_hidden_layers"])]
    if hf.get("layer_types") not in (None, expected):
        raise ValueError(f"layer_types {hf['layer_types']} is not ModernBERT's every-{every}-th-global pattern")


def _modernbert_head(hf: dict[str, Any], kind: str) -> dict[str, Any]:
    """ModernBERT's prediction head (dense, classifier_activation, norm) before every head's last layer."""
    if kind == "mlm" and not hf.get("decoder_bias", True):
        raise ValueError("ModernBertForMaskedLM with decoder_bias false is not supported")
    transform = dict(head_activation=activation(hf.get("classifier_activation", "gelu")), head_norm=True,
                     head_bias=hf.get("classifier_bias", False))
    return {"sequence": dict(head="pooler", head_pooling=hf.get("classifier_pooling", "cls"), **transform),
            "tokens": dict(head="tokens", head_transform=True, **transform),
            "mlm": dict(head="mlm", tie_decoder=hf.get("tie_word_embeddings", True), **transform)}.get(kind, {})


_BERT_LAYERS = layers("encoder.layer.{i}.", {
    "attention.self.query": "attention.q_proj", "attention.self.key": "attention.k_proj",
    "attention.self.value": "attention.v_proj", "attention.output.dense": "attention.out_proj",
    "attention.output.LayerNorm": "attn_norm", "intermediate.dense": "ffn.up", "output.dense": "ffn.down",
    "output.LayerNorm": "ffn_norm",
})
_BERT_EMBEDDINGS: Table = {
    "embeddings.word_embeddings": "embeddings.token", "embeddings.position_embeddings": "embeddings.position",
    "embeddings.token_type_embeddings": "embeddings.token_type", "embeddings.LayerNorm": "embeddings.norm",
}
_LM_HEAD: Table = {  # RoBERTa and MPNet
    "lm_head.dense": "head.transform", "lm_head.layer_norm": "head.transform.norm",
    "lm_head.decoder": "head.decoder", "lm_head.bias": "head.decoder.bias",
}
_CLASSIFICATION_HEAD: Table = {"classifier.dense": "head.pooler", "classifier.out_proj": "head.classifier"}

BERT = Family(
    "bert", ("bert",), ("Bert",), "bert.", _bert_body, {**_BERT_EMBEDDINGS, **_BERT_LAYERS},
    heads={"sequence": {"pooler.dense": "head.pooler", "classifier": "head.classifier"},
           "tokens": {"classifier": "head.classifier"},
           "mlm": {"cls.predictions.transform.dense": "head.transform",
                   "cls.predictions.transform.LayerNorm": "head.transform.norm",
                   "cls.predictions.decoder": "head.decoder", "cls.predictions.bias": "head.decoder.bias"}},
    head_config=_bert_head, ignored=("pooler.",),
)
ROBERTA = Family(
    "roberta", ("roberta", "xlm-roberta", "camembert"), ("Roberta", "XLMRoberta", "Camembert"), "roberta.",
    _roberta_body, {**_BERT_EMBEDDINGS, **_BERT_LAYERS},
    heads={"sequence": _CLASSIFICATION_HEAD, "tokens": {"classifier": "head.classifier"}, "mlm": _LM_HEAD},
    head_config=_bert_head, ignored=("pooler.",),
)
DISTILBERT = Family(
    "distilbert", ("distilbert",), ("DistilBert",), "distilbert.", _distilbert_body,
    {"embeddings.word_embeddings": "embeddings.token", "embeddings.position_embeddings": "embeddings.position",
     "embeddings.LayerNorm": "embeddings.norm", **layers("transformer.layer.{i}.", {
         "attention.q_lin": "attention.q_proj", "attention.k_lin": "attention.k_proj",
         "attention.v_lin": "attention.v_proj", "attention.out_lin": "attention.out_proj",
         "sa_layer_norm": "attn_norm", "ffn.lin1": "ffn.up", "ffn.lin2": "ffn.down",
         "output_layer_norm": "ffn_norm"})},
    heads={"sequence": {"pre_classifier": "head.pooler", "classifier": "head.classifier"},
           "tokens": {"classifier": "head.classifier"},
           "mlm": {"vocab_transform": "head.transform", "vocab_layer_norm": "head.transform.norm",
                   "vocab_projector": "head.decoder"}},
    head_config=_distilbert_head,
)
MPNET = Family(
    "mpnet", ("mpnet",), ("MPNet",), "mpnet.", _mpnet_body,
    {"embeddings.word_embeddings": "embeddings.token", "embeddings.position_embeddings": "embeddings.position",
     "embeddings.LayerNorm": "embeddings.norm", "encoder.relative_attention_bias": "relative_bias.table",
     **layers("encoder.layer.{i}.", {
         "attention.attn.q": "attention.q_proj", "attention.attn.k": "attention.k_proj",
         "attention.attn.v": "attention.v_proj", "attention.attn.o": "attention.out_proj",
         "attention.LayerNorm": "attn_norm", "intermediate.dense": "ffn.up", "output.dense": "ffn.down",
         "output.LayerNorm": "ffn_norm"})},
    heads={"sequence": _CLASSIFICATION_HEAD, "tokens": {"classifier": "head.classifier"}, "mlm": _LM_HEAD},
    head_config=_bert_head, ignored=("pooler.",),
)
MODERNBERT = Family(
    "modernbert", ("modernbert",), ("ModernBert",), "model.", _modernbert_body,
    {"embeddings.tok_embeddings": "embeddings.token", "embeddings.norm": "embeddings.norm",
     "final_norm": "final_norm", **layers("layers.{i}.", {
         "attn_norm": "attn_norm", "attn.Wqkv": ("attention.q_proj", "attention.k_proj", "attention.v_proj"),
         "attn.Wo": "attention.out_proj", "mlp_norm": "ffn_norm", "mlp.Wi": "ffn.up", "mlp.Wo": "ffn.down"})},
    heads={"sequence": {"head.dense": "head.pooler", "head.norm": "head.pooler.norm", "classifier": "head.classifier"},
           "tokens": {"head.dense": "head.transform", "head.norm": "head.transform.norm",
                      "classifier": "head.classifier"},
           "mlm": {"head.dense": "head.transform", "head.norm": "head.transform.norm", "decoder": "head.decoder"}},
    head_config=_modernbert_head,
)
ENCODERS = (BERT, ROBERTA, DISTILBERT, MPNET, MODERNBERT)
