"""ColBERT checkpoints in the two layouts they ship in, loaded into the encoder's multi-vector output.

    PyLate             a sentence-transformers folder whose modules.json names pylate.models.Dense.Dense: the
                       Transformer at the root (its config.json, weights and tokenizer.json, with "[Q] " / "[D] "
                       added as tokens by PyLate), one bias-free Dense projecting every token (not a pooled vector)
                       and config_sentence_transformers.json's query_prefix, document_prefix, query_length,
                       document_length, attend_to_expansion_tokens, do_query_expansion and skiplist_words
    colbert-ai         HF_ColBERT saved by save_pretrained: config.json (architectures ["HF_ColBERT"]), bert.* beside
                       a bias-free linear.weight, its tokenizer and artifact.metadata (ColBERTConfig: query_token_id
                       / doc_token_id markers, query_maxlen, doc_maxlen, attend_to_mask_tokens, mask_punctuation)

Both become one encoder whose multi_vector is that projection (bias as saved), and a bundle.multi_vector.MultiVectorSpec
saying what the references do around it, read as they read it: the prefix token inserted after [CLS], queries
padded to their length with [MASK] (attended or not), all of a query's positions kept, documents' skip-list ids
dropped (PyLate: convert_tokens_to_ids of each skiplist word, [UNK] for a word outside the vocabulary, as PyLate
does; colbert-ai: the first id of each punctuation symbol's encoding), every vector L2-normalised, MaxSim summed.
A setting this loader cannot reproduce (no query expansion, a Dense with an activation or residual, several
Dense modules, colbert-ai's l2 similarity or flipr interaction) is refused by name.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer
from torch import Tensor

from bundle.multi_vector import MultiVectorSpec
from model.checkpoint import LoadedModel
from model.config import EncoderConfig
from model.encoder import Encoder
from model.families import family_of, rename
from model.sentence import load_weights, read_json
from model.tokenizer import load_tokenizer

PYLATE_DENSE = "pylate.models.Dense.Dense"
PYLATE_DEFAULTS = dict(query_prefix="[Q] ", document_prefix="[D] ", query_length=32, document_length=180,
                       attend_to_expansion_tokens=False, do_query_expansion=True,
                       skiplist_words=list(string.punctuation))  # PyLate's ColBERT defaults for a missing key


def colbert_layout(path: Path) -> str | None:
    """"pylate", "colbert-ai", or None for a directory in neither layout."""
    path = Path(path)
    if (path / "modules.json").is_file() and any(
            m.get("type", "").startswith("pylate.") for m in read_json(path / "modules.json")):
        return "pylate"
    if (path / "artifact.metadata").is_file() and (path / "config.json").is_file() and \
            read_json(path / "config.json").get("architectures") == ["HF_ColBERT"]:
        return "colbert-ai"
    return None


def load_pylate(path: Path) -> LoadedModel:
    """A PyLate folder (the registry's "pylate" layout, model/layouts.py, recognised by colbert_layout)."""
    return _load(Path(path), "pylate")


def load_colbert_ai(path: Path) -> LoadedModel:
    """A colbert-ai checkpoint (the registry's "colbert-ai" layout)."""
    return _load(Path(path), "colbert-ai")


def _load(path: Path, layout: str) -> LoadedModel:
    tokenizer = load_tokenizer(path / "tokenizer.json")
    if layout == "pylate":
        projection, bias = _pylate_dense(path)
        spec = pylate_spec(path, tokenizer, projection.shape[0])
        weights = load_weights(path)
    else:
        weights = load_weights(path)
        projection, bias = weights.pop("linear.weight"), None
        spec = colbert_ai_spec(path, tokenizer, projection.shape[0])
    encoder = _encoder(read_json(path / "config.json"), weights, projection, bias,
                       max(spec.query_length, spec.document_length))
    return LoadedModel(encoder.eval(), tokenizer, layout, path, multi_vector=spec)


def _encoder(hf: dict[str, Any], weights: dict[str, Tensor], projection: Tensor, bias: Tensor | None,
             longest: int) -> Encoder:
    """The bare encoder of config.json's family (HF_ColBERT read as its base model) with the projection as its
    multi_vector; inputs as long as the longest query or document, within the position limit."""
    hf = {**hf, "architectures": None}  # the family's base model: HF_ColBERT's bert.* are BertModel's
    family, _ = family_of(hf)
    state = rename(weights, family, "none", hf)
    config = EncoderConfig(**{**family.config(hf), **family.head_config(hf, "none"), "pooling": "cls",
                              "multi_vector_size": int(projection.shape[0]), "multi_vector_bias": bias is not None})
    config = config.replace(max_seq_length=min(longest, config.position_limit))
    state["multi_vector.weight"] = projection
    if bias is not None:
        state["multi_vector.bias"] = bias
    encoder = Encoder(config)
    encoder.load_state_dict(state, strict=True)
    return encoder


def _pylate_dense(path: Path) -> tuple[Tensor, Tensor | None]:
    """The one PyLate Dense module's (M, D) weight and its bias (None when bias-free)."""
    modules = read_json(path / "modules.json")
    denses = [m for m in modules if m.get("type") == PYLATE_DENSE]
    others = [m["type"] for m in modules if m.get("type") != PYLATE_DENSE and not m["type"].endswith(".Transformer")]
    if len(denses) != 1 or others or modules[0].get("path", "") != "":
        raise ValueError(f"{path}: a PyLate folder with its Transformer at the root and one Dense is supported; "
                         f"modules.json lists {[m['type'] for m in modules]}")
    where = path / denses[0]["path"]
    config = read_json(where / "config.json")
    activation = str(config.get("activation_function", "")).rsplit(".", 1)[-1]
    if activation != "Identity" or config.get("use_residual"):
        raise ValueError(f"{where}: a Dense with activation {activation!r} or use_residual is not supported "
                         "(PyLate's projection is a plain linear map)")
    weights = load_weights(where)
    return weights["linear.weight"], weights.get("linear.bias")


def pylate_spec(path: Path, tokenizer: Tokenizer, size: int) -> MultiVectorSpec:
    """config_sentence_transformers.json's ColBERT settings (PyLate's defaults where a key is missing)."""
    config = {**PYLATE_DEFAULTS, **read_json(path / "config_sentence_transformers.json")}
    if not config["do_query_expansion"]:
        raise ValueError(f"{path}: do_query_expansion false (queries truncated, not padded) is not supported")
    unk = _token_id(tokenizer, _special(path, "unk_token", "[UNK]"), path)
    skip = {tokenizer.token_to_id(word) for word in config["skiplist_words"]}
    return MultiVectorSpec(
        size=size, normalize=True, reduction="sum",
        query_prefix_ids=_prefix_ids(tokenizer, config["query_prefix"], path),
        document_prefix_ids=_prefix_ids(tokenizer, config["document_prefix"], path),
        query_length=int(config["query_length"]), expansion_token_id=_expansion_id(path, tokenizer),
        attend_to_expansion=bool(config["attend_to_expansion_tokens"]),
        document_length=int(config["document_length"]),
        skip_ids=sorted(unk if i is None else i for i in skip))  # a word outside the vocabulary: [UNK], as PyLate


def colbert_ai_spec(path: Path, tokenizer: Tokenizer, size: int) -> MultiVectorSpec:
    """artifact.metadata's ColBERTConfig, as colbert-ai's Query/DocTokenizer and ColBERT.mask apply it."""
    meta = read_json(path / "artifact.metadata")
    if meta.get("similarity", "cosine") != "cosine" or meta.get("interaction", "colbert") != "colbert":
        raise ValueError(f"{path}: colbert-ai similarity {meta.get('similarity')!r} / interaction "
                         f"{meta.get('interaction')!r} is not supported (cosine / colbert is)")
    skip = sorted({tokenizer.encode(symbol, add_special_tokens=False).ids[0] for symbol in string.punctuation}) \
        if meta.get("mask_punctuation", True) else []
    return MultiVectorSpec(
        size=size, normalize=True, reduction="sum",
        query_prefix_ids=[_token_id(tokenizer, meta.get("query_token_id", "[unused0]"), path)],
        document_prefix_ids=[_token_id(tokenizer, meta.get("doc_token_id", "[unused1]"), path)],
        query_length=int(meta.get("query_maxlen", 32)), expansion_token_id=_expansion_id(path, tokenizer),
        attend_to_expansion=bool(meta.get("attend_to_mask_tokens", False)),
        document_length=int(meta.get("doc_maxlen", 220)), skip_ids=skip)


def _prefix_ids(tokenizer: Tokenizer, prefix: str, path: Path) -> list[int]:
    return [_token_id(tokenizer, prefix, path)] if prefix else []


def _expansion_id(path: Path, tokenizer: Tokenizer) -> int:
    """The [MASK] queries are padded with (PyLate sets its tokenizer's pad id to it; colbert-ai replaces pad ids)."""
    return _token_id(tokenizer, _special(path, "mask_token", "[MASK]"), path)


def _special(path: Path, name: str, default: str) -> str:
    config = read_json(path / "tokenizer_config.json") if (path / "tokenizer_config.json").is_file() else {}
    value = config.get(name) or default
    return str(value["content"] if isinstance(value, dict) else value)


def _token_id(tokenizer: Tokenizer, token: str, path: Path) -> int:
    token_id = tokenizer.token_to_id(token)
    if token_id is None:
        raise ValueError(f"{path}: token {token!r} is not in the tokenizer's vocabulary")
    return token_id
