"""Random-weight NomicBERT, GTE and jina-embeddings-v3 models (transformers' native classes), saved as Hugging Face
directories with their kind of tokenizer (NomicBERT: BERT's WordPiece; GTE and jina: XLM-R's Unigram).

    save_rotary(directory, "gte", "ForSequenceClassification", shape="realistic") -> the reference model

Cases: nomic_bert, gte (rope_type linear, as the released GTE checkpoints write their static NTK scaling),
gte-dynamic (rope_type dynamic, max_position_embeddings shorter than the long test inputs, so the base grows) and
jina_v3. Every rotary theta is off its family's default, so a theta read from the wrong place shows.
Shapes: "tiny" (hidden 32, 2 heads, 2 layers) on tests/helpers/families.padded_batches (24 and 6 tokens);
"realistic" (hidden 128, 2 heads of width 64, 4 layers) on long_batches (a few hundred tokens, padded).
Every 1-D parameter is moved off its start (tests/helpers/families.randomise_vectors).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import transformers
from tokenizers import Tokenizer

from model.tokenizer import pad_batch, pad_id, token_ids
from tests.helpers import tokenizers
from tests.helpers.families import LABELS, padded_batches, save_random

ARCHES = ("nomic_bert", "gte", "gte-dynamic", "jina_v3")
CLASSES = {"nomic_bert": "NomicBert", "gte": "Gte", "gte-dynamic": "Gte", "jina_v3": "JinaEmbeddingsV3"}
CONFIGS = {"nomic_bert": transformers.NomicBertConfig, "gte": transformers.GteConfig,
           "gte-dynamic": transformers.GteConfig, "jina_v3": transformers.JinaEmbeddingsV3Config}
SHAPES = {"tiny": dict(hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=64),
          "realistic": dict(hidden_size=128, num_attention_heads=2, num_hidden_layers=4, intermediate_size=256)}
POSITIONS = {"tiny": 64, "realistic": 512}
DYNAMIC_POSITIONS = {"tiny": 16, "realistic": 128}  # under the inputs' 24 and few hundred tokens
ROPE = {"nomic_bert": {"rope_type": "default", "rope_theta": 500.0},
        "gte": {"rope_type": "linear", "factor": 2.0, "rope_theta": 40_000.0},
        "gte-dynamic": {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 5_000.0},
        "jina_v3": {"rope_type": "default", "rope_theta": 700.0}}
LONG_TOKENS = 320


def tokenizer_for(arch: str) -> Tokenizer:
    return tokenizers.wordpiece() if arch == "nomic_bert" else tokenizers.unigram()


def rotary_config(arch: str, shape: str, vocab_size: int, names: dict[int, str] = LABELS,
                  **extra: Any) -> transformers.PretrainedConfig:
    names = extra.pop("id2label", names)
    positions = (DYNAMIC_POSITIONS if arch == "gte-dynamic" else POSITIONS)[shape]
    extra = {"rope_parameters": dict(ROPE[arch]), **extra}  # a test may give its own
    return CONFIGS[arch](vocab_size=vocab_size, max_position_embeddings=positions, id2label=names,
                         label2id={v: k for k, v in names.items()}, **SHAPES[shape], **extra)


def model_class(arch: str, head: str) -> type:
    return getattr(transformers, f"{CLASSES[arch]}{head}")


def save_rotary(directory: Path, arch: str, head: str = "Model", shape: str = "tiny", seed: int = 0,
                names: dict[int, str] = LABELS, **extra: Any) -> torch.nn.Module:
    """A seeded random `arch` model with `head` saved at `directory` with its tokenizer; returns it (eval, eager
    attention) as transformers loads it."""
    tokenizer = tokenizer_for(arch)
    config = rotary_config(arch, shape, tokenizer.get_vocab_size(), names, **extra)
    save_random(directory, model_class(arch, head), config, tokenizer, seed)
    return model_class(arch, head).from_pretrained(directory, attn_implementation="eager").eval()


def long_batches(tokenizer: Tokenizer) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(input_ids, attention_mask), (B, T) each: a text of LONG_TOKENS tokens beside one of about half as many,
    right-padded, and the same left-padded."""
    text = " ".join(tokenizers.MULTILINGUAL * 4)
    long, short = token_ids(tokenizer, [text], LONG_TOKENS), token_ids(tokenizer, [text[::-1]], LONG_TOKENS // 2 + 7)
    ids, mask = pad_batch(long + short, pad_id(tokenizer))
    left_ids, left_mask = torch.full_like(ids, pad_id(tokenizer)), torch.zeros_like(mask)
    for row, n in enumerate(mask.sum(1).tolist()):
        left_ids[row, ids.size(1) - n:], left_mask[row, ids.size(1) - n:] = ids[row, :n], 1
    return [(ids, mask), (left_ids, left_mask)]


def batches(tokenizer: Tokenizer, shape: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return padded_batches(tokenizer) if shape == "tiny" else long_batches(tokenizer)
