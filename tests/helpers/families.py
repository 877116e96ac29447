"""Random-weight transformers models of every architecture the loader knows, saved as Hugging Face
directories (config.json, model.safetensors, tokenizer.json) in well under a second each.

    save_hf(directory, "xlm-roberta", "ForSequenceClassification", shape="wide") -> the reference model

Weights: transformers' own initialisation with its seed, then every 1-D parameter (biases, norm weights)
moved off its 1 / 0 start, so a swapped or missing bias or norm shows. Shapes are tiny (hidden 32-48, 2-3
layers, 2-4 heads); "wide" also turns on the axes a family can set differently (ModernBERT: biases, mean
classifier pooling, a tanh GELU, a global layer every 2). ModernBERT's window (local_attention 4, i.e.
two tokens each side) is shorter than the test inputs, so its local layers are exercised.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import transformers
from tokenizers import Tokenizer

from model.tokenizer import encode, pad_id
from tests.helpers import tokenizers

ARCHITECTURES = ("bert", "roberta", "xlm-roberta", "camembert", "distilbert", "mpnet", "modernbert")
HEADS = ("Model", "ForSequenceClassification", "ForTokenClassification", "ForMaskedLM")
CLASS_PREFIX = {"bert": "Bert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert",
                "distilbert": "DistilBert", "mpnet": "MPNet", "modernbert": "ModernBert"}
TOKENIZERS = {"bert": tokenizers.wordpiece, "roberta": tokenizers.byte_level_bpe, "xlm-roberta": tokenizers.unigram,
              "camembert": tokenizers.unigram, "distilbert": tokenizers.wordpiece,
              "mpnet": tokenizers.wordpiece_fairseq, "modernbert": tokenizers.modernbert_bpe}
SHAPES = {"small": dict(hidden=32, heads=2, layers=2, ffn=64), "wide": dict(hidden=48, heads=4, layers=3, ffn=80)}
LABELS = {0: "neg", 1: "neutral", 2: "pos"}
RELEVANCE = {0: "relevance"}  # one label: a cross-encoder's
ENTITIES = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}  # a token classifier's BIO labels
MAX_POSITIONS = 64
MODERNBERT_TOKENS = {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "[PAD]", "unk_token": "[UNK]",
                     "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"}


def hf_config(arch: str, shape: str, vocab_size: int, names: dict[int, str] = LABELS,
              **extra: Any) -> transformers.PretrainedConfig:
    """`names` (or `id2label`): the heads' labels (one label: a cross-encoder)."""
    s = SHAPES[shape]
    names = extra.pop("id2label", names)  # {0: "relevant"}: a one-label scorer, as cross-encoders are
    labels = dict(id2label=names, label2id={v: k for k, v in names.items()})
    if arch == "distilbert":
        return transformers.DistilBertConfig(
            vocab_size=vocab_size, dim=s["hidden"], n_heads=s["heads"], n_layers=s["layers"], hidden_dim=s["ffn"],
            max_position_embeddings=MAX_POSITIONS, **labels, **extra)
    if arch == "modernbert":
        return transformers.ModernBertConfig(**{**_modernbert(s, shape, vocab_size), **extra}, **labels)
    common = dict(vocab_size=vocab_size, hidden_size=s["hidden"], num_attention_heads=s["heads"],
                  num_hidden_layers=s["layers"], intermediate_size=s["ffn"], **labels)
    if arch == "bert":
        return transformers.BertConfig(max_position_embeddings=MAX_POSITIONS, **common, **extra)
    fairseq = dict(max_position_embeddings=MAX_POSITIONS + 2, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    cls = {"roberta": transformers.RobertaConfig, "xlm-roberta": transformers.XLMRobertaConfig,
           "camembert": transformers.CamembertConfig, "mpnet": transformers.MPNetConfig}[arch]
    return cls(**fairseq, **common, **extra)


def _modernbert(s: dict[str, int], shape: str, vocab_size: int) -> dict[str, Any]:
    config: dict[str, Any] = dict(
        vocab_size=vocab_size, hidden_size=s["hidden"], num_attention_heads=s["heads"],
        num_hidden_layers=s["layers"], intermediate_size=s["ffn"], max_position_embeddings=MAX_POSITIONS,
        pad_token_id=0, cls_token_id=2, bos_token_id=2, sep_token_id=3, eos_token_id=3, local_attention=4,
        global_attn_every_n_layers=3,
    )
    if shape == "wide":
        config.update(attention_bias=True, mlp_bias=True, norm_bias=True, classifier_bias=True,
                      classifier_pooling="mean", hidden_activation="gelu_pytorch_tanh", global_attn_every_n_layers=2)
    return config


def model_class(arch: str, head: str) -> type:
    return getattr(transformers, f"{CLASS_PREFIX[arch]}{head}")


def tokenizer_for(arch: str) -> Tokenizer:
    return TOKENIZERS[arch]()


def save_hf(directory: Path, arch: str, head: str = "Model", shape: str = "small", seed: int = 0,
            names: dict[int, str] = LABELS, **extra: Any) -> torch.nn.Module:
    """A seeded random `arch` model with `head` saved at `directory` with its tokenizer; returns it (eval,
    eager attention) as the reference."""
    tokenizer = tokenizer_for(arch)
    config = hf_config(arch, shape, tokenizer.get_vocab_size(), names, **extra)
    save_random(directory, model_class(arch, head), config, tokenizer, seed)
    if arch == "modernbert":  # no tokenizer class of its own: transformers reads its special tokens from here
        (Path(directory) / "tokenizer_config.json").write_text(json.dumps(MODERNBERT_TOKENS))
    return reference(directory, arch, head)


def save_random(directory: Path, cls: type, config: transformers.PretrainedConfig, tokenizer: Tokenizer,
                seed: int) -> None:
    """A `cls` model of `config` with transformers' seeded initialisation, its vectors moved off their start,
    saved at `directory` with `tokenizer`."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = cls(config)
        randomise_vectors(model)
    model.save_pretrained(directory)
    tokenizer.save(str(Path(directory) / "tokenizer.json"))


def reference(directory: Path, arch: str, head: str) -> torch.nn.Module:
    """The saved model as transformers loads it, eager attention (ModernBERT: its plain padded path)."""
    return model_class(arch, head).from_pretrained(directory, attn_implementation="eager").eval()


def padded_batches(tokenizer: Tokenizer) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(input_ids, attention_mask), (B, T) each: MULTILINGUAL right-padded to 24 tokens, the same left-padded,
    and three texts cut to 6 tokens."""
    ids, mask = encode(tokenizer, tokenizers.MULTILINGUAL, 24)
    left_ids, left_mask = torch.full_like(ids, pad_id(tokenizer)), torch.zeros_like(mask)
    for row, n in enumerate(mask.sum(1).tolist()):
        left_ids[row, ids.size(1) - n:], left_mask[row, ids.size(1) - n:] = ids[row, :n], 1
    return [(ids, mask), (left_ids, left_mask), encode(tokenizer, tokenizers.MULTILINGUAL[:3], 6)]


def randomise_vectors(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:
                param.add_(torch.randn_like(param) * 0.1)


def trained_magnitudes(model: torch.nn.Module, query_scale: float) -> None:
    """A random model moved towards a trained one's magnitudes: its norms' vectors spread around their start (sd 0.3),
    the other vectors (biases) off theirs (sd 0.1), and the query projections scaled by `query_scale`, so that the
    attention scores reach tens as a trained model's do."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 1:
                param.add_(torch.randn_like(param) * (0.3 if "norm" in name.lower() else 0.1))
            if name.endswith(("query.weight", "q_proj.weight")):
                param.mul_(query_scale)
