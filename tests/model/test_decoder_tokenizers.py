"""The decoder embedders' tokenizers, built offline (tests/helpers/tokenizers.py): Qwen3-Embedding's byte-level
BPE that appends <|endoftext|>, and Gemma's SentencePiece BPE with byte fallback under EmbeddingGemma's <bos> ...
<eos>. The ids the bundle's tokenizer.json gives (the `tokenizers` library, as the server tokenises) equal
transformers' AutoTokenizer's for a directory holding that file and the tokenizer_config.json the real model
ships, on multilingual text with emoji, alone and in pairs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import transformers
from tokenizers import Tokenizer

from model.tokenizer import token_ids
from tests.helpers import tokenizers
from tests.helpers.tokenizers import MULTILINGUAL

TEXTS = [*MULTILINGUAL, "Crabs 🦀 and ℵ₀ in a 🏳️‍🌈 parade", "  leading and trailing  ", "tab\there\r\nCRLF"]
CONFIGS: dict[str, tuple[Callable[[], Tokenizer], dict]] = {
    "qwen3-embedding": (tokenizers.qwen_bpe, {
        "tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "bos_token": None, "unk_token": None, "add_prefix_space": False, "padding_side": "left"}),
    "embeddinggemma": (tokenizers.gemma_bpe, {
        "tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
        "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": True, "padding_side": "right"}),
}


@pytest.fixture(params=list(CONFIGS))
def saved(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Tokenizer, object]:
    build, config = CONFIGS[request.param]
    tokenizer = build()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return request.param, Tokenizer.from_file(str(tmp_path / "tokenizer.json")), \
        transformers.AutoTokenizer.from_pretrained(tmp_path)


def test_ids_equal_transformers(saved: tuple[str, Tokenizer, object]) -> None:
    name, ours, theirs = saved
    expected = [theirs(text)["input_ids"] for text in TEXTS]  # type: ignore[operator]
    assert token_ids(ours, TEXTS, 10_000) == expected
    pairs = list(zip(TEXTS[:4], TEXTS[4:8], strict=True))
    assert [e.ids for e in ours.encode_batch(pairs)] == [theirs(a, b)["input_ids"] for a, b in pairs]  # type: ignore[operator]


def test_the_special_tokens_are_the_models(saved: tuple[str, Tokenizer, object]) -> None:
    name, ours, _ = saved
    ids = ours.encode("hello").ids
    if name == "qwen3-embedding":
        assert ids[-1] == ours.token_to_id("<|endoftext|>") and ours.token_to_id("<|endoftext|>") not in ids[:-1]
    else:
        assert (ids[0], ids[-1]) == (ours.token_to_id("<bos>"), ours.token_to_id("<eos>"))


def test_gemma_falls_back_to_bytes_and_qwen_never_loses_a_character() -> None:
    gemma, qwen = tokenizers.gemma_bpe(), tokenizers.qwen_bpe()
    crab = gemma.encode("🦀").tokens  # U+1F980: F0 9F A6 80
    assert [t for t in crab if t.startswith("<0x")] == ["<0xF0>", "<0x9F>", "<0xA6>", "<0x80>"]
    assert gemma.token_to_id("<unk>") not in gemma.encode(TEXTS[-3]).ids
    for text in TEXTS:
        assert qwen.decode(qwen.encode(text, add_special_tokens=False).ids) == text
        assert gemma.decode(gemma.encode(text, add_special_tokens=False).ids) == text
