"""Load BERT-family checkpoints in the Hugging Face directory layout into our Encoder.

Supported: BertModel, BertForSequenceClassification (labels from id2label) and
sentence-transformers directories (pooling from the Pooling module's config, L2 normalisation
when a Normalize module is listed in modules.json). Weights come from model.safetensors, or from
pytorch_model.bin through torch.load(weights_only=True); never from an unrestricted pickle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import Tensor

from model.checkpoint import LoadedModel
from model.config import EncoderConfig
from model.encoder import Encoder
from model.tokenizer import load_tokenizer

SUPPORTED_ACTIVATIONS = ("gelu",)


def is_hf_bert_dir(path: Path) -> bool:
    return (path / "config.json").is_file() and "model_type" in _read_json(path / "config.json")


def load_hf_bert(path: Path) -> LoadedModel:
    path = Path(path)
    hf = _read_json(_require(path, "config.json"))
    _check_supported(hf, path)
    _require(path, "tokenizer.json")
    weights = _strip_prefix(_load_weights(path))
    pooling, normalize, sentence = _sentence_transformers_pooling(path)
    config = _encoder_config(hf, weights, pooling, normalize).replace(max_seq_length=_st_max_seq_length(path, hf))
    encoder = Encoder(config)
    encoder.load_state_dict(_rename(weights, config), strict=True)
    kind = "sentence-transformers" if sentence else "hf-bert"
    return LoadedModel(encoder.eval(), load_tokenizer(path / "tokenizer.json"), kind, path)


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _require(path: Path, name: str) -> Path:
    if not (path / name).is_file():
        raise FileNotFoundError(f"{path} is not a loadable BERT directory: {name} is missing")
    return path / name


def _check_supported(hf: dict[str, Any], path: Path) -> None:
    if hf.get("model_type") != "bert":
        raise ValueError(
            f"{path / 'config.json'}: model_type {hf.get('model_type')!r} is not supported; "
            "only BERT-family checkpoints (model_type 'bert') load"
        )
    if hf.get("hidden_act", "gelu") not in SUPPORTED_ACTIVATIONS:
        raise ValueError(f"hidden_act {hf.get('hidden_act')!r} is not supported (only exact gelu)")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError("only absolute position embeddings are supported")


def _load_weights(path: Path) -> dict[str, Tensor]:
    if (path / "model.safetensors").is_file():
        return load_file(str(path / "model.safetensors"))
    if (path / "pytorch_model.bin").is_file():
        return torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"{path} has no weights: model.safetensors or pytorch_model.bin is missing")


def _strip_prefix(weights: dict[str, Tensor]) -> dict[str, Tensor]:
    out = {}
    for key, value in weights.items():
        key = key.removeprefix("bert.").replace("LayerNorm.gamma", "LayerNorm.weight")
        out[key.replace("LayerNorm.beta", "LayerNorm.bias")] = value
    return out


def _sentence_transformers_pooling(path: Path) -> tuple[str, bool, bool]:
    """(pooling, normalize, is sentence-transformers) from modules.json and the Pooling config."""
    if not (path / "modules.json").is_file():
        return "cls", False, False
    modules = json.loads((path / "modules.json").read_text())
    types = {m["type"].rsplit(".", 1)[-1]: m for m in modules}
    normalize = "Normalize" in types
    if "Pooling" not in types:
        return "mean", normalize, True
    pool_cfg = _read_json(_require(path / types["Pooling"]["path"], "config.json"))
    if pool_cfg.get("pooling_mode_mean_tokens"):
        return "mean", normalize, True
    if pool_cfg.get("pooling_mode_cls_token"):
        return "cls", normalize, True
    raise ValueError(f"{path}: only mean or CLS pooling is supported, got {pool_cfg}")


def _st_max_seq_length(path: Path, hf: dict[str, Any]) -> int:
    """sentence-transformers' max_seq_length (e.g. 256 for MiniLM), capped by the position table; 0 if unset."""
    st_config = path / "sentence_bert_config.json"
    if not st_config.is_file():
        return 0
    value = int(_read_json(st_config).get("max_seq_length") or 0)
    return min(value, hf.get("max_position_embeddings", 512))


def _encoder_config(hf: dict[str, Any], weights: dict[str, Tensor], pooling: str, normalize: bool) -> EncoderConfig:
    has_head = "classifier.weight" in weights
    labels = _labels(hf, weights) if has_head else ()
    return EncoderConfig(
        vocab_size=hf["vocab_size"], d_model=hf["hidden_size"], num_heads=hf["num_attention_heads"],
        num_layers=hf["num_hidden_layers"], d_ff=hf["intermediate_size"],
        max_length=hf.get("max_position_embeddings", 512), dropout=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        type_vocab_size=hf.get("type_vocab_size", 2), pad_token_id=hf.get("pad_token_id", 0),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12), pooling=pooling, normalize=normalize,
        head="pooler" if has_head else "none", num_labels=len(labels), label_names=labels,
        head_dropout=hf.get("classifier_dropout") or hf.get("hidden_dropout_prob", 0.1),
    )


def _labels(hf: dict[str, Any], weights: dict[str, Tensor]) -> tuple[str, ...]:
    count = weights["classifier.weight"].shape[0]
    id2label = hf.get("id2label") or {}
    return tuple(str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(count))


_EMBEDDINGS = {
    "embeddings.word_embeddings": "embeddings.token",
    "embeddings.position_embeddings": "embeddings.position",
    "embeddings.token_type_embeddings": "embeddings.token_type",
    "embeddings.LayerNorm": "embeddings.norm",
}
_LAYER = {
    "attention.self.query": "attention.q_proj",
    "attention.self.key": "attention.k_proj",
    "attention.self.value": "attention.v_proj",
    "attention.output.dense": "attention.out_proj",
    "attention.output.LayerNorm": "attn_norm",
    "intermediate.dense": "ffn.up",
    "output.dense": "ffn.down",
    "output.LayerNorm": "ffn_norm",
}


def _rename(weights: dict[str, Tensor], config: EncoderConfig) -> dict[str, Tensor]:
    table = dict(_EMBEDDINGS)
    for i in range(config.num_layers):
        table.update({f"encoder.layer.{i}.{src}": f"blocks.{i}.{dst}" for src, dst in _LAYER.items()})
    if config.head == "pooler":
        table.update({"pooler.dense": "head.pooler", "classifier": "head.classifier"})
    out = {}
    for key, value in weights.items():
        module, _, param = key.rpartition(".")
        if module in table:
            out[f"{table[module]}.{param}"] = value
    return out
