"""bge-m3 as FlagEmbedding writes it: an XLM-R directory (XLMRobertaModel) with `colbert_linear.pt` (Linear(D, M) with
a bias; M = D for BAAI/bge-m3) and `sparse_linear.pt` (Linear(D, 1)) beside it, read as BGEM3FlagModel applies them.

BGEM3FlagModel (FlagEmbedding 1.4.2, inference/embedder/encoder_only/m3.py and finetune/.../m3/modeling.py), on the
last hidden states of one forward pass:
    dense_vecs       the first (CLS) token's state, L2-normalised: our pooling "cls" + normalize
    lexical_weights  relu(sparse_linear(state)) per token; per token id the largest weight, only weights > 0, the
                     tokenizer's cls, eos, pad and unk ids left out: our token_weight, then
                     inference.tasks.multi_vector_scores.lexical_weights with the spec's sparse_drop_ids
    colbert_vecs     colbert_linear(state) at every real token but the first (CLS), each L2-normalised: our
                     multi_vector, then inference.tasks.multi_vector_scores.token_vectors (skip_first_token, normalize)
    colbert_score    each query vector's best dot product over the document's, averaged over the query's vectors
                     (reduction "mean")
Both files or neither: FlagEmbedding initialises a missing one at random (for training), which no server should.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import Tensor

from bundle.multi_vector import MultiVectorSpec

COLBERT_FILE, SPARSE_FILE = "colbert_linear.pt", "sparse_linear.pt"
# the tokens FlagEmbedding drops from the lexical weights, and XLM-R's tokenizer's defaults for them
DROPPED_TOKENS = {"cls_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}


@dataclass
class BgeM3Heads:
    fields: dict[str, Any]  # EncoderConfig fields: the multi-vector outputs, FlagEmbedding's dense pooling
    weights: dict[str, Tensor]  # under our names: multi_vector.*, token_weight.*
    spec: MultiVectorSpec


def has_bge_m3_heads(path: Path) -> bool:
    """Whether `path` holds either of FlagEmbedding's bge-m3 head files."""
    return (path / COLBERT_FILE).is_file() or (path / SPARSE_FILE).is_file()


def read_bge_m3(path: Path, tokenizer: Tokenizer, d_model: int) -> BgeM3Heads | None:
    """The bge-m3 heads beside the encoder at `path` (None when it has neither file), checked against its width."""
    if not has_bge_m3_heads(path):
        return None
    missing = [name for name in (COLBERT_FILE, SPARSE_FILE) if not (path / name).is_file()]
    if missing:
        raise ValueError(f"{path}: bge-m3 needs both {COLBERT_FILE} and {SPARSE_FILE}; {', '.join(missing)} is "
                         "missing (FlagEmbedding would initialise it at random, for training)")
    colbert, sparse = _linear(path / COLBERT_FILE, d_model), _linear(path / SPARSE_FILE, d_model)
    if sparse["weight"].shape[0] != 1 or "bias" not in sparse:
        raise ValueError(f"{path / SPARSE_FILE}: expected Linear({d_model}, 1) with a bias, got weight "
                         f"{tuple(sparse['weight'].shape)} and {'a' if 'bias' in sparse else 'no'} bias")
    size = int(colbert["weight"].shape[0])
    fields = dict(multi_vector_size=size, multi_vector_bias="bias" in colbert, token_weights=True,
                  pooling="cls", normalize=True)
    weights = {**{f"multi_vector.{k}": v for k, v in colbert.items()},
               **{f"token_weight.{k}": v for k, v in sparse.items()}}
    spec = MultiVectorSpec(size=size, normalize=True, reduction="mean", skip_first_token=True,
                           sparse_drop_ids=dropped_ids(path, tokenizer))
    return BgeM3Heads(fields, weights, spec)


def _linear(file: Path, d_model: int) -> dict[str, Tensor]:
    """A torch.save'd Linear state dict (weight, optional bias) read with weights_only, its input width checked."""
    state = torch.load(file, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or "weight" not in state or set(state) - {"weight", "bias"}:
        raise ValueError(f"{file}: expected a Linear's state dict (weight, bias); got {type(state).__name__} "
                         f"{sorted(state) if isinstance(state, dict) else ''}")
    if state["weight"].dim() != 2 or state["weight"].shape[1] != d_model:
        raise ValueError(f"{file}: weight {tuple(state['weight'].shape)} does not read the encoder's width {d_model}")
    return {k: v.float().contiguous() for k, v in state.items()}


def dropped_ids(path: Path, tokenizer: Tokenizer) -> list[int]:
    """The ids of the tokenizer's cls, eos, pad and unk tokens (special_tokens_map.json, else tokenizer_config.json,
    else XLM-R's defaults), sorted: the ids FlagEmbedding leaves out of the lexical weights."""
    named = {**DROPPED_TOKENS, **_named_tokens(path / "tokenizer_config.json"),
             **_named_tokens(path / "special_tokens_map.json")}
    ids = {tokenizer.token_to_id(named[name]) for name in DROPPED_TOKENS}
    return sorted(i for i in ids if i is not None)


def _named_tokens(file: Path) -> dict[str, str]:
    """The dropped tokens a tokenizer file names (as a string, or as an AddedToken's {"content": ...})."""
    if not file.is_file():
        return {}
    data = json.loads(file.read_text())
    found = {name: data[name] for name in DROPPED_TOKENS if data.get(name)}
    return {name: str(value["content"] if isinstance(value, dict) else value) for name, value in found.items()}
