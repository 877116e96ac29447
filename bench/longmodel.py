"""Random-weight long-input models of real shapes, each exported to a bundle once and cached, for bench.lengths.

    build/bench-lengths/<preset>/source/              config.json, model.safetensors, tokenizer.json (transformers)
    build/bench-lengths/<preset>/bundle-<code hash>/  `attnserve export source --variants fp32`

Presets (each checkpoint's config.json, less its defaults; weights are transformers' own initialisation with a fixed
seed: time and memory do not depend on what the weights learned):

    modernbert-base      hidden 768, 22 layers, 12 heads, feed-forward 1152, a sliding window of 128 in two layers of
                         three, 8,192 positions
    qwen3-0.6b           Qwen3-Embedding-0.6B: hidden 1024, 28 causal layers, 16 query heads over 8 key/value heads
                         of 128, feed-forward 3072, 32,768 positions, a 151,669-token vocabulary
    embeddinggemma-300m  EmbeddingGemma-300m: hidden 768, 24 bidirectional layers, 3 query heads over 1 key/value
                         head of 256, a sliding window of 512 in five layers of six, 2,048 positions, 262,144 tokens

The tokenizer is a word-level one over bench.texts' word list with a [CLS] / [SEP] template, so a text of n words is
n + 2 tokens (what the ids mean does not change a model's time or memory).

A bundle is keyed on the code that shapes the graph (model/, export/): a change to the attention rebuilds it rather
than measuring a stale graph. Older bundles of the preset are removed (ModernBERT-base's is about 1.2 GB, Qwen3's
4.8 GB).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, models, pre_tokenizers, processors

from bench.procs import ROOT
from bench.texts import WORDS

CACHE = ROOT / "build" / "bench-lengths"
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
SPECIAL_IDS: dict[str, Any] = dict(pad_token_id=0, bos_token_id=2, eos_token_id=3)  # the word-level tokenizer's
MODERNBERT_BASE: dict[str, Any] = dict(  # answerdotai/ModernBERT-base's config.json, less its defaults
    vocab_size=50368, hidden_size=768, intermediate_size=1152, num_hidden_layers=22, num_attention_heads=12,
    max_position_embeddings=8192, local_attention=128, global_attn_every_n_layers=3,
    cls_token_id=2, sep_token_id=3, **SPECIAL_IDS,
)
QWEN3_EMBEDDING_06B: dict[str, Any] = dict(  # Qwen/Qwen3-Embedding-0.6B's config.json, less its defaults
    vocab_size=151669, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
    num_key_value_heads=8, head_dim=128, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
    tie_word_embeddings=True, **SPECIAL_IDS,
)
EMBEDDINGGEMMA_300M: dict[str, Any] = dict(  # google/embeddinggemma-300m's config.json, less its defaults
    vocab_size=262144, hidden_size=768, intermediate_size=1152, num_hidden_layers=24, num_attention_heads=3,
    num_key_value_heads=1, head_dim=256, max_position_embeddings=2048, sliding_window=512, query_pre_attn_scalar=256,
    layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 4, use_bidirectional_attention=True,
    rope_theta=1000000.0, rope_local_base_freq=10000.0, rms_norm_eps=1e-6, **SPECIAL_IDS,
)


@dataclass(frozen=True)
class Preset:
    model_type: str  # transformers' model_type
    config: dict[str, Any]
    lengths: tuple[int, ...]  # bench.lengths' default token counts for it


PRESETS = {
    "modernbert-base": Preset("modernbert", MODERNBERT_BASE, (512, 2048, 8192)),
    "qwen3-0.6b": Preset("qwen3", QWEN3_EMBEDDING_06B, (512, 2048, 8192, 32768)),
    "embeddinggemma-300m": Preset("gemma3_text", EMBEDDINGGEMMA_300M, (512, 2048)),
}


def cached_bundle(preset: str = "modernbert-base", layers: int = 0) -> Path:
    """The preset's cached bundle for the current code, built (source, then export) when missing. layers > 0: the
    preset cut to its first `layers` layers (one input's activations are a layer's at a time, so a shallow cut shows
    a long input's memory in minutes where the whole depth takes tens of them)."""
    home = CACHE / (f"{preset}-{layers}-layers" if layers else preset)
    bundle = home / f"bundle-{code_hash()}"
    if not (bundle / "manifest.json").is_file():
        source = home / "source"
        if not (source / "model.safetensors").is_file():
            write_source(source, shallow(PRESETS[preset], layers) if layers else PRESETS[preset])
        for stale in home.glob("bundle-*"):
            shutil.rmtree(stale)
        print(f"exporting {source} to {bundle} (once per version of model/ and export/) ...", flush=True)
        subprocess.run([sys.executable, "-m", "attnserve", "export", str(source), "--out", str(bundle),
                        "--variants", "fp32", "--quiet"], cwd=ROOT, check=True)
    return bundle


def shallow(preset: Preset, layers: int) -> Preset:
    """The preset with its first `layers` layers."""
    config = {**preset.config, "num_hidden_layers": layers}
    if "layer_types" in config:
        config["layer_types"] = config["layer_types"][:layers]
    return Preset(preset.model_type, config, preset.lengths)


def code_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted([*(ROOT / "model").glob("*.py"), *(ROOT / "export").glob("*.py"), ROOT / "bundle" / "feeds.py",
                        Path(__file__)]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def write_source(directory: Path, preset: Preset) -> None:
    """The preset's transformers model with seeded random weights, saved with a word-level tokenizer."""
    import torch
    import transformers

    print(f"writing a random-weight {preset.model_type} to {directory} ...", flush=True)
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(preset.model_type, **preset.config)
    transformers.AutoModel.from_config(config).save_pretrained(directory)
    word_level_tokenizer().save(str(directory / "tokenizer.json"))


def word_level_tokenizer() -> Tokenizer:
    vocab = {token: i for i, token in enumerate(dict.fromkeys([*SPECIALS, *WORDS]))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tokenizer
