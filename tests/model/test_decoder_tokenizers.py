"""The decoder embedders' tokenizers, built offline (tests/helpers/tokenizers.py): Qwen3-Embedding's byte-level
BPE that appends <|endoftext|>, and Gemma's SentencePiece BPE with byte fallback under EmbeddingGemma's <bos> ...
<eos>. The ids the bundle's tokenizer.json gives (model.tokenizer, as the server tokenises) equal transformers'
AutoTokenizer's for a directory holding that file and the tokenizer_config.json the real model ships, on
multilingual text with emoji, alone and in pairs.

transformers 5 rebuilds both pipelines in Python from the file's vocabulary and merges (Qwen2Tokenizer,
GemmaTokenizer), so that comparison checks normaliser, split and model; but it takes the post-processor from
tokenizer.json as it is and drops tokenizer_config's add_bos_token / add_eos_token whenever a tokenizer.json is
there (tokenization_utils_base, _from_pretrained). So the templates are checked against their sources too:
EmbeddingGemma's against the tokenizer transformers' Gemma 3 conversion builds for it (GemmaTokenizer with
add_bos_token and add_eos_token), Qwen3-Embedding's against its tokenizer.json's post_processor, transcribed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import transformers
from tokenizers import Tokenizer

from model.tokenizer import pair_ids, token_ids
from tests.helpers import tokenizers
from tests.helpers.tokenizers import MULTILINGUAL

TEXTS = [*MULTILINGUAL, "Crabs 🦀 and ℵ₀ in a 🏳️‍🌈 parade", "  leading and trailing  ", "tab\there\r\nCRLF"]
PAIRS = list(zip(TEXTS[:6], TEXTS[6:12], strict=True))
# the tokenizer_config.json each model ships (the parts that bear on tokenisation); Qwen3-Embedding's padding side
# is the one its model card asks for
CONFIGS: dict[str, tuple[Callable[[], Tokenizer], dict[str, Any]]] = {
    "qwen3-embedding": (tokenizers.qwen_bpe, {
        "tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "bos_token": None, "unk_token": None, "add_prefix_space": False, "padding_side": "left"}),
    "embeddinggemma": (tokenizers.gemma_bpe, {
        "tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
        "unk_token": "<unk>", "mask_token": "<mask>", "add_bos_token": True, "add_eos_token": True,
        "padding_side": "right"}),
}
# Qwen3-Embedding's tokenizer.json post_processor, <|endoftext|> at id 151643 there
QWEN3_EMBEDDING_POST_PROCESSOR = {
    "type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        {"type": "TemplateProcessing",
         "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
         "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 0}},
                  {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
         "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [151643], "tokens": ["<|endoftext|>"]}}},
    ]}


@pytest.fixture(params=list(CONFIGS))
def saved(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Tokenizer, Any]:
    build, config = CONFIGS[request.param]
    build().save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return request.param, Tokenizer.from_file(str(tmp_path / "tokenizer.json")), \
        transformers.AutoTokenizer.from_pretrained(tmp_path)


def test_ids_equal_transformers(saved: tuple[str, Tokenizer, Any]) -> None:
    name, ours, theirs = saved
    assert type(theirs).__name__ == CONFIGS[name][1]["tokenizer_class"]
    assert token_ids(ours, TEXTS, 10_000) == [theirs(text)["input_ids"] for text in TEXTS]
    assert pair_ids(ours, PAIRS, 10_000)[0] == [theirs(a, b)["input_ids"] for a, b in PAIRS]


def test_embeddinggemma_template_is_the_one_transformers_builds_for_it() -> None:
    """transformers' convert_gemma3_weights.py saves EmbeddingGemma's tokenizer as GemmaTokenizer(vocab, merges,
    add_bos_token=True, add_eos_token=True, padding_side="right"); built that way here from our vocabulary, it
    gives our ids, pairs included (<bos> A <eos> <bos> B <eos>)."""
    ours = tokenizers.gemma_bpe()
    model = json.loads(ours.to_str())["model"]
    theirs = transformers.GemmaTokenizer(vocab=model["vocab"], merges=[tuple(m) for m in model["merges"]],
                                         add_bos_token=True, add_eos_token=True, padding_side="right")
    assert token_ids(ours, TEXTS, 10_000) == [theirs(text)["input_ids"] for text in TEXTS]
    assert pair_ids(ours, PAIRS, 10_000)[0] == [theirs(a, b)["input_ids"] for a, b in PAIRS]
    specials = [t for t in ours.encode("a", "b").tokens if t in ("<bos>", "<eos>")]
    assert specials == ["<bos>", "<eos>", "<bos>", "<eos>"]


def test_qwen3_embedding_template_is_its_tokenizer_json_s() -> None:
    ours = json.loads(tokenizers.qwen_bpe().to_str())["post_processor"]
    expected = json.loads(json.dumps(QWEN3_EMBEDDING_POST_PROCESSOR).replace("151643", "0"))
    assert ours == expected


def test_the_special_tokens_are_the_models(saved: tuple[str, Tokenizer, Any]) -> None:
    name, ours, _ = saved
    ids, pair = ours.encode("hello").ids, ours.encode("hello", "world").ids
    if name == "qwen3-embedding":
        end = ours.token_to_id("<|endoftext|>")
        assert (ids[-1], pair[-1]) == (end, end) and end not in ids[:-1] + pair[:-1]
    else:
        assert ours.token_to_id("<bos>") == 2 and ours.token_to_id("<eos>") == 1 and ours.token_to_id("<pad>") == 0
        assert (ids[0], ids[-1]) == (ours.token_to_id("<bos>"), ours.token_to_id("<eos>"))


def test_gemma_falls_back_to_bytes_and_qwen_never_loses_a_character() -> None:
    gemma, qwen = tokenizers.gemma_bpe(), tokenizers.qwen_bpe()
    crab = gemma.encode("🦀").tokens  # U+1F980: F0 9F A6 80
    assert [t for t in crab if t.startswith("<0x")] == ["<0xF0>", "<0x9F>", "<0xA6>", "<0x80>"]
    assert gemma.token_to_id("<unk>") not in gemma.encode(TEXTS[-3]).ids
    for text in TEXTS:
        assert qwen.decode(qwen.encode(text, add_special_tokens=False).ids) == text
        assert gemma.decode(gemma.encode(text, add_special_tokens=False).ids) == text
