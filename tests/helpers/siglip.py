"""A SigLIP checkpoint's tokenizer files, made here: a SentencePiece unigram model trained on a generated corpus (a
second or two) with the options of SigLIP's spiece.model (T5's English vocabulary: pad 0, eos 1, unk 2, no bos,
nmt_nfkc, pieces "▁the"), and SigLIP's tokenizer_config.json (tests/model/test_siglip_tokenizer.py, the pair tests).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import sentencepiece as spm

CONFIG = {
    "added_tokens_decoder": {
        str(index): {
            "content": content,
            "lstrip": True,
            "normalized": False,
            "rstrip": True,
            "single_word": False,
            "special": True,
        }
        for index, content in ((1, "</s>"), (2, "<unk>"))
    },
    "additional_special_tokens": [],
    "clean_up_tokenization_spaces": True,
    "do_lower_case": True,
    "eos_token": "</s>",
    "model_input_names": ["input_ids"],
    "model_max_length": 64,
    "pad_token": "</s>",
    "processor_class": "SiglipProcessor",
    "sp_model_kwargs": {},
    "tokenizer_class": "SiglipTokenizer",
    "unk_token": "<unk>",
}
WORDS = (  # split in _corpus
    "the a photo of an cat dog on in with two three red blue man woman sitting near street car tree house small "
    "large café naïve résumé über Straße 2024 42 1999 Apple Paris New York οδός Σοφία λόγος ΟΔΟΣ σ ς"
)
SYLLABLES = "ka ri to mi na su the re an on in at er es or ti la ne co de pho"
def corpus(seed: int) -> list[str]:
    """Captions of WORDS and made-up words, some capitalised, ending in punctuation SigLIP drops."""
    rng = random.Random(seed)
    syllables = SYLLABLES.split()
    words = WORDS.split() + ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(300)]
    sentences = []
    for _ in range(3000):
        chosen = [rng.choice(words) for _ in range(rng.randint(3, 14))]
        chosen = [word.capitalize() if rng.random() < 0.2 else word for word in chosen]
        sentences.append(" ".join(chosen) + rng.choice([".", "!", "?", ",", ""]))
    return sentences


def train_spiece(directory: Path, vocab_size: int, **options: Any) -> Path:
    """A SentencePiece model as SigLIP's spiece.model is one (unigram, T5's ids and normalisation) into directory."""
    directory.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus(vocab_size)),
        model_prefix=str(directory / "spiece"),
        vocab_size=vocab_size,
        model_type=options.pop("model_type", "unigram"),
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        character_coverage=0.999,
        normalization_rule_name="nmt_nfkc",
        hard_vocab_limit=False,
        minloglevel=2,
        **options,
    )
    return directory


def write_siglip_config(directory: Path, **changes: Any) -> Path:
    config = {key: value for key, value in {**CONFIG, **changes}.items() if value is not None}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory
