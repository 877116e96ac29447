"""model/sentencepiece.py's fast tokenizer gives transformers' SiglipTokenizer's ids, and refuses what it cannot.

The reference is SiglipTokenizer.from_pretrained on the same checkpoint directory, as a SigLIP checkpoint is loaded.
Each checkpoint is a SentencePiece unigram model trained here on a generated corpus (a second or two), with the
options of SigLIP's spiece.model (T5's English vocabulary: pad 0, eos 1, unk 2, no bos, nmt_nfkc, pieces "▁the"),
and SigLIP's tokenizer_config.json. Three: small and lower-cased (SigLIP's do_lower_case), larger and cased, and
larger and lower-cased. The characters outside the corpus (CJK, emoji) are unknown pieces; Greek is in it, so
lower-casing's final sigma shows in the ids.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from model.sentencepiece import siglip_tokenizer
from tests.helpers.siglip import corpus, train_spiece, write_siglip_config

TEXTS = [
    "",
    " ",
    "   ",
    "!!!",
    "hi",
    " hi",
    "hi ",
    "  the cat  ",
    "The PHOTO of a Cat.",
    "Hello, World!",
    "(a photo)",
    "don't stop -- believing...",
    "a,b;c:d",
    "#1 @home $5 100% a&b *x* ~y~ `z` {} [] <> | \\ ^ _",
    "a  b",
    "tab\tnew\nline\r\nend\x0bv\x0cf",
    "\u00a0nbsp\u3000ideographic\x1cfile\x1dgroup\u2028line\u2029para\x85nel",
    "\u200bzero width",
    "a\u200b\u200bb",
    "\u2581\u2581the",
    "the\u2581",
    "x\u2581y",
    "café naïve Straße résumé",
    "e\u0301 combining",
    "\ufb01 ligature \u00bd",
    "ｆｕｌｌｗｉｄｔｈ！",
    "İstanbul",
    "ΟΔΟΣ",
    "ΟΔΟΣ ΣΟΦΙΑ",
    "Σ",
    "ΑΣ' Α'Σ",
    "ὈΔΥΣΣΕΎΣ",
    "中文 😀",
    "unknown ☃ snow",
    "2024-01-01 42.5 1,000,000 0.001",
    "cat <unk>",
    "x" * 300,
    "“smart quotes” — dash … ellipsis",
    "x\u0000y\u0007",
]


@pytest.fixture(
    scope="module", params=[(400, True), (1200, False), (1200, True)], ids=["400-lower", "1200-cased", "1200-lower"]
)
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    vocab_size, lower_case = request.param
    directory = train_spiece(tmp_path_factory.mktemp("siglip"), vocab_size)
    return write_siglip_config(directory, do_lower_case=lower_case)


@pytest.fixture(scope="module")
def reference(checkpoint: Path) -> Any:
    from transformers import SiglipTokenizer

    return SiglipTokenizer.from_pretrained(str(checkpoint))


def _as_bundled(checkpoint: Path) -> Tokenizer:
    """The tokenizer as a bundle carries it: written to tokenizer.json's text and read back."""
    return Tokenizer.from_str(siglip_tokenizer(checkpoint).to_str())


def test_ids_equal_siglip_tokenizers(checkpoint: Path, reference: Any) -> None:
    texts = TEXTS + corpus(7)[:300]
    tokenizer = _as_bundled(checkpoint)
    expected = [reference(text)["input_ids"] for text in texts]
    got = [encoding.ids for encoding in tokenizer.encode_batch(texts)]
    differ = {text[:50]: (want, have) for text, want, have in zip(texts, expected, got, strict=True) if want != have}
    assert differ == {}
    assert {len(ids) for ids in expected} > {1, 2, 3}  # the cases reach the model, not only the eos


def test_final_sigma_reaches_the_ids(checkpoint: Path, reference: Any) -> None:
    """ς and σ are distinct pieces here, so lower-casing "ΟΔΟΣ" must end it in ς, as str.lower() does; a cased
    checkpoint keeps Σ. Either way the ids are the reference's."""
    lowered = reference("ΟΔΟΣ")["input_ids"] == reference("οδος")["input_ids"]
    assert lowered == reference.do_lower_case
    assert not lowered or reference("οδος")["input_ids"] != reference("οδοσ")["input_ids"]
    for text in ("ΟΔΟΣ", "ΟΔΟΣ ΣΟΦΙΑ", "ΑΣ'", "Σ"):
        assert _as_bundled(checkpoint).encode(text).ids == reference(text)["input_ids"]


@pytest.mark.parametrize("max_length", [1, 2, 5, 16, 64])
def test_truncation_keeps_the_eos(checkpoint: Path, reference: Any, max_length: int) -> None:
    tokenizer = _as_bundled(checkpoint)
    tokenizer.enable_truncation(max_length)
    for text in [" ".join(corpus(11)[:20]), "x" * 300, "The PHOTO of a Cat.", ""]:
        expected = reference(text, truncation=True, max_length=max_length)["input_ids"]
        assert tokenizer.encode(text).ids == expected
        assert expected[-1] == 1 and len(expected) <= max(max_length, 1)


def test_special_tokens_and_vocabulary(checkpoint: Path, reference: Any) -> None:
    tokenizer = _as_bundled(checkpoint)
    assert tokenizer.token_to_id("</s>") == reference.eos_token_id == 1
    assert tokenizer.token_to_id("<unk>") == reference.unk_token_id == 2
    assert tokenizer.get_vocab_size() == reference.vocab_size
    unknown = [reference.convert_tokens_to_ids("▁"), 2, 1]  # CJK is outside the corpus: one <unk> for the run
    assert tokenizer.encode("中文").ids == reference("中文")["input_ids"] == unknown


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small checkpoint the refusals copy and break."""
    return write_siglip_config(train_spiece(tmp_path_factory.mktemp("siglip-small"), 300))


def _copy(trained: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "checkpoint"))


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"keep_punctuation_exact_string": "{}"}, "keep_punctuation_exact_string"),
        ({"do_lower_case": "yes"}, "do_lower_case"),
        ({"tokenizer_class": "T5Tokenizer"}, "tokenizer_class"),
        ({"additional_special_tokens": ["<extra_id_0>"]}, "additional_special_tokens"),
        ({"sp_model_kwargs": {"enable_sampling": True}}, "sp_model_kwargs"),
        ({"truncation_side": "left"}, "truncation_side"),
        ({"split_special_tokens": True}, "split_special_tokens"),
        ({"eos_token": "<eos>"}, "eos_token"),
        ({"added_tokens_decoder": {"300": {"content": "<mask>", "special": True}}}, "added_tokens_decoder"),
        ({"added_tokens_decoder": {"1": {"content": "</s>", "lstrip": False, "special": True}}}, "lstrip"),
        ({"add_prefix_space": True}, "add_prefix_space"),
    ],
)
def test_config_options_it_cannot_reproduce_are_refused(
    trained: Path, tmp_path: Path, changes: dict[str, Any], named: str
) -> None:
    directory = write_siglip_config(_copy(trained, tmp_path), **changes)
    with pytest.raises(ValueError, match=rf"tokenizer_config\.json: .*{named}"):
        siglip_tokenizer(directory)


def test_missing_or_unreadable_files_are_refused(trained: Path, tmp_path: Path) -> None:
    directory = _copy(trained, tmp_path)
    (directory / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"tokenizer_config\.json: unreadable"):
        siglip_tokenizer(directory)
    (directory / "tokenizer_config.json").unlink()
    with pytest.raises(ValueError, match=r"tokenizer_config\.json: missing"):
        siglip_tokenizer(directory)
    write_siglip_config(directory)
    (directory / "spiece.model").write_bytes(b"\x0a\xff\xff not a model")
    with pytest.raises(ValueError, match=r"spiece\.model: not a SentencePiece model"):
        siglip_tokenizer(directory)
    (directory / "spiece.model").unlink()
    with pytest.raises(ValueError, match=r"spiece\.model: no SentencePiece model"):
        siglip_tokenizer(directory)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"model_type": "bpe"}, "model_type"),
        ({"byte_fallback": True}, "byte_fallback"),
        ({"remove_extra_whitespaces": False}, "remove_extra_whitespaces"),
        ({"user_defined_symbols": ["<image>"]}, "user-defined"),
        ({"treat_whitespace_as_suffix": True}, "treat_whitespace_as_suffix"),
        ({"control_symbols": ["MASK"]}, "control piece"),
    ],
)
def test_sentencepiece_options_it_cannot_reproduce_are_refused(
    tmp_path: Path, options: dict[str, Any], named: str
) -> None:
    directory = write_siglip_config(train_spiece(tmp_path / "checkpoint", 600, **options))  # byte_fallback: 256
    with pytest.raises(ValueError, match=rf"spiece\.model: .*{named}"):
        siglip_tokenizer(directory)


@pytest.mark.parametrize("legacy", [True, False])
def test_legacy_changes_nothing(trained: Path, tmp_path: Path, legacy: bool) -> None:
    """legacy only drops SentencePiece's dummy prefix, which SiglipTokenizer cuts off with its "<unk>" prefix."""
    from transformers import SiglipTokenizer

    directory = write_siglip_config(_copy(trained, tmp_path), legacy=legacy)
    reference = SiglipTokenizer.from_pretrained(str(directory))
    tokenizer = siglip_tokenizer(directory)
    assert [tokenizer.encode(text).ids for text in TEXTS] == [reference(text)["input_ids"] for text in TEXTS]
