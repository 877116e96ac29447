"""A random-weight ModernBERT of ModernBERT-base's shape, exported to a bundle once and cached, for bench.lengths.

    build/bench-lengths/source/              config.json, model.safetensors, tokenizer.json (transformers)
    build/bench-lengths/bundle-<code hash>/  `attnserve export source --variants fp32`

ModernBERT-base's config (hidden 768, 22 layers, 12 heads, feed-forward 1152, a sliding window of 128 in two
layers of three, 8,192 positions); weights are transformers' own initialisation with a fixed seed: time and
memory do not depend on what the weights learned. The tokenizer is a word-level one over bench.texts' word
list with ModernBERT's [CLS] / [SEP] template, so a text of n words is n + 2 tokens.

The bundle is keyed on the code that shapes the graph (model/, export/): a change to the attention rebuilds
it rather than measuring a stale graph. Older bundles are removed (each is about 1.2 GB).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, models, pre_tokenizers, processors

from bench.procs import ROOT
from bench.texts import WORDS

CACHE = ROOT / "build" / "bench-lengths"
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MODERNBERT_BASE: dict[str, Any] = dict(  # answerdotai/ModernBERT-base's config.json, less its defaults
    vocab_size=50368, hidden_size=768, intermediate_size=1152, num_hidden_layers=22, num_attention_heads=12,
    max_position_embeddings=8192, local_attention=128, global_attn_every_n_layers=3,
    pad_token_id=0, cls_token_id=2, sep_token_id=3, bos_token_id=2, eos_token_id=3,  # the word-level tokenizer's
)


def cached_bundle() -> Path:
    """The cached bundle for the current code, built (source, then export) when missing."""
    bundle = CACHE / f"bundle-{code_hash()}"
    if not (bundle / "manifest.json").is_file():
        source = CACHE / "source"
        if not (source / "model.safetensors").is_file():
            write_source(source)
        for stale in CACHE.glob("bundle-*"):
            shutil.rmtree(stale)
        print(f"exporting {source} to {bundle} (once per version of model/ and export/) ...", flush=True)
        subprocess.run([sys.executable, "-m", "attnserve", "export", str(source), "--out", str(bundle),
                        "--variants", "fp32", "--quiet"], cwd=ROOT, check=True)
    return bundle


def code_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted([*(ROOT / "model").glob("*.py"), *(ROOT / "export").glob("*.py"), Path(__file__)]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def write_source(directory: Path) -> None:
    """ModernBertModel(ModernBERT-base's config), seeded random weights, saved with a word-level tokenizer."""
    import torch
    import transformers

    print(f"writing a random-weight ModernBERT-base to {directory} ...", flush=True)
    torch.manual_seed(0)
    model = transformers.ModernBertModel(transformers.ModernBertConfig(**MODERNBERT_BASE))
    model.save_pretrained(directory)
    word_level_tokenizer().save(str(directory / "tokenizer.json"))


def word_level_tokenizer() -> Tokenizer:
    vocab = {token: i for i, token in enumerate(dict.fromkeys([*SPECIALS, *WORDS]))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tokenizer
