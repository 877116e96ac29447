"""Random-weight transformers decoders (Llama, Mistral, Qwen2, Qwen3, Gemma3 causal and bidirectional as
EmbeddingGemma sets it), saved as Hugging Face directories in well under a second each.

    save_decoder(directory, "qwen3", "ForSequenceClassification", shape="wide") -> the reference model

Shapes: "small" has 4 query heads over 2 key/value heads and a head width (16) other than hidden / heads (8);
"wide" has 6 query heads over 2 key/value heads, 3 layers, sliding windows of 4 (shorter than the 24-token test
inputs) where the family has them, and the biases and switches the family can set. Every 1-D parameter (norm
weights, biases) is moved off its start (tests/helpers/families.randomise_vectors), rotary bases are not the
defaults and differ per layer type, so a swapped norm, bias or base shows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from tokenizers import AddedToken, Tokenizer

from model.lm_scorer import DEFAULT_INSTRUCTION, RECIPES
from tests.helpers import tokenizers
from tests.helpers.families import LABELS, save_random

DECODERS = ("llama", "mistral", "qwen2", "qwen3", "gemma3", "embeddinggemma")
CLASSES = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "gemma3": "Gemma3Text",
           "embeddinggemma": "Gemma3Text"}
SHAPES = {"small": dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        num_hidden_layers=2, intermediate_size=64),
          "wide": dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, head_dim=12,
                       num_hidden_layers=3, intermediate_size=80)}
MAX_POSITIONS = 64
# what transformers (and sentence-transformers, which pads) read besides tokenizer.json
TOKENIZER_CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "eos_token": "</s>",
                    "bos_token": "<s>", "unk_token": "<unk>", "padding_side": "right"}
WINDOW = 4


def decoder_config(arch: str, shape: str, vocab_size: int, pad_id: int, names: dict[int, str] = LABELS,
                   **extra: Any) -> transformers.PretrainedConfig:
    wide = shape == "wide"
    names = extra.pop("id2label", names)  # {0: "relevant"}: a one-label scorer
    positions = extra.pop("max_position_embeddings", MAX_POSITIONS)
    common = dict(vocab_size=vocab_size, max_position_embeddings=positions, pad_token_id=pad_id,
                  id2label=names, label2id={v: k for k, v in names.items()}, rms_norm_eps=1e-6, **SHAPES[shape])
    rope = {"rope_type": "default", "rope_theta": 500.0}
    if arch == "llama":
        return transformers.LlamaConfig(**common, rope_parameters=rope, attention_bias=wide, mlp_bias=wide, **extra)
    if arch == "mistral":
        return transformers.MistralConfig(**common, rope_parameters=rope, sliding_window=WINDOW if wide else None,
                                          **extra)
    if arch in ("qwen2", "qwen3"):
        cls = transformers.Qwen2Config if arch == "qwen2" else transformers.Qwen3Config
        bias = {} if arch == "qwen2" else {"attention_bias": wide}
        return cls(**common, rope_parameters=rope, use_sliding_window=wide, sliding_window=WINDOW, max_window_layers=1,
                   **bias, **extra)
    return transformers.Gemma3TextConfig(**_gemma3(arch, wide), **common, **extra)


def _gemma3(arch: str, wide: bool) -> dict[str, Any]:
    """Gemma3: a global layer every 2 (small: layers 0 local, 1 global; wide: 0, 2 local, 1 global), its own query
    scale, two rotary bases; EmbeddingGemma's switch to bidirectional attention (its window is the whole width)."""
    return dict(query_pre_attn_scalar=24, sliding_window=WINDOW if arch == "gemma3" else 2 * WINDOW,
                sliding_window_pattern=2, use_bidirectional_attention=arch == "embeddinggemma",
                hidden_activation="gelu_pytorch_tanh" if wide else "gelu",
                rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 2_000.0},
                                 "sliding_attention": {"rope_type": "default", "rope_theta": 300.0}})


def model_class(arch: str, head: str) -> type:
    if arch in ("gemma3", "embeddinggemma") and head == "ForCausalLM":
        return transformers.Gemma3ForCausalLM
    return getattr(transformers, f"{CLASSES[arch]}{head}")


def tokenizer_for(arch: str) -> Any:
    return tokenizers.byte_level_bpe()


def save_decoder(directory: Path, arch: str, head: str = "Model", shape: str = "small", seed: int = 0,
                 names: dict[int, str] = LABELS, tokenizer: Any = None, **extra: Any) -> torch.nn.Module:
    """A seeded random `arch` decoder with `head` saved at `directory` with its tokenizer (the family's test
    tokenizer unless one is given); returns it (eval, eager attention) as the reference."""
    tokenizer = tokenizer or tokenizer_for(arch)
    pad = tokenizer.token_to_id("<pad>")
    config = decoder_config(arch, shape, tokenizer.get_vocab_size(with_added_tokens=True), pad, names, **extra)
    save_random(directory, model_class(arch, head), config, tokenizer, seed)
    (Path(directory) / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG))
    return model_class(arch, head).from_pretrained(directory, attn_implementation="eager").eval()


def reranker_tokenizer() -> Tokenizer:
    """A byte-level BPE with Qwen's chat tokens and single "yes" / "no" tokens, as Qwen3's vocabulary has."""
    tokenizer = tokenizers.byte_level_bpe()
    tokenizer.add_special_tokens(["<|im_start|>", "<|im_end|>", "<think>", "</think>"])
    tokenizer.add_tokens([AddedToken("yes", single_word=True), AddedToken("no", single_word=True)])
    return tokenizer


def reference_scores(model: torch.nn.Module, tokenizer: Tokenizer, query: str, documents: list[str]) -> np.ndarray:
    """Qwen3-Reranker's scoring as its model card writes it: prefix and suffix tokenised apart from the pair,
    the last position's "no" and "yes" logits through a softmax, one pair at a time (no padding)."""
    recipe = RECIPES["qwen3"]
    plain = Tokenizer.from_str(tokenizer.to_str())
    prefix, suffix = (plain.encode(t, add_special_tokens=False).ids for t in (recipe.prefix, recipe.suffix))
    yes, no = tokenizer.token_to_id("yes"), tokenizer.token_to_id("no")
    scores = []
    for document in documents:
        pair = f"<Instruct>: {DEFAULT_INSTRUCTION}\n<Query>: {query}\n<Document>: {document}"
        ids = torch.tensor([prefix + plain.encode(pair, add_special_tokens=False).ids + suffix])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, -1]  # (V,)
        scores.append(torch.log_softmax(torch.stack([logits[no], logits[yes]]), dim=0)[1].exp().item())
    return np.asarray(scores)
