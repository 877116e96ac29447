"""A SigLIP checkpoint's SentencePiece tokenizer as a `tokenizers` Tokenizer, for the bundle's tokenizer.json.

Why: a SigLIP checkpoint ships `spiece.model` and `tokenizer_config.json`, and transformers tokenises it with the slow
`SiglipTokenizer`, which canonicalises the text in Python before SentencePiece sees it. transformers has no converter
for it (its T5 converter would skip the canonicalisation), so this module builds the equivalent fast tokenizer from
`tokenizers` parts and SentencePiece's model protobuf, one part per step of SiglipTokenizer:

    SiglipTokenizer (transformers 5)                    here
    "▁" in the text -> " "                              Replace
    split out </s>, <unk>, pad; strip around them      special AddedTokens, lstrip/rstrip, not normalised
    str.lower() (final sigma: Σ -> ς at a word's end)   Replace Σ -> ς in Python's final-sigma context, Lowercase
    drop string.punctuation (ASCII only)               Replace
    collapse Python's whitespace (re \\s) into " "       Replace with Python's whitespace characters, listed
    SentencePiece: charsmap (nmt_nfkc)                  Precompiled (the model's own charsmap)
    ... spaces collapsed, stripped; "▁" before the text Replace, Prepend; Metaspace turns spaces into "▁"
    unigram Viterbi, runs of unknown characters fused   Unigram with the same pieces and scores
    </s> appended (truncation keeps it)                 TemplateProcessing

Anything the checkpoint sets that this table does not cover is refused with a ValueError naming the file and the
option, never converted into a tokenizer that differs.

The "▁" goes in front of each piece of text between special tokens (Prepend), not only the first: Metaspace's
"first" scheme decides by the piece's offset in the raw text, which dropping a leading "(" or a zero-width space
moves. So a text that itself contains a special token's string differs after it ("a </s> b": "▁b" here, "b" in
SiglipTokenizer, which tokenises what follows a special token after "<unk>"), and a text ending in a literal "</s>"
gets a second </s> here, none there. Every other text gets SiglipTokenizer's ids
(tests/model/test_siglip_tokenizer.py).
"""

from __future__ import annotations

import functools
import json
import string
import sys
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import Unigram

SPIECE = "spiece.model"
CONFIG = "tokenizer_config.json"
SPACE_SYMBOL = "\u2581"  # "▁", SentencePiece's space
# tokenizer_config.json keys that change nothing SiglipTokenizer's ids depend on (decoding, names, padding).
INERT_KEYS = frozenset(
    {
        "added_tokens_decoder",  # checked against the special tokens below
        "clean_up_tokenization_spaces",
        "model_input_names",
        "model_max_length",
        "name_or_path",
        "padding_side",
        "processor_class",
        "legacy",  # only drops SentencePiece's dummy prefix, which SiglipTokenizer cuts off with its "<unk>" prefix
        "special_tokens_map_file",
    }
)
EMPTY_KEYS = ("additional_special_tokens", "extra_special_tokens", "sp_model_kwargs")
DEFAULTS = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "</s>", "do_lower_case": True}
UNIGRAM = 1  # trainer_spec.model_type
UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 2, 3, 4, 5, 6  # pieces' types


def siglip_tokenizer(checkpoint_dir: Path) -> Tokenizer:
    """The fast tokenizer giving SiglipTokenizer's ids for `checkpoint_dir`'s spiece.model and tokenizer_config.json.

    Single texts, </s> appended; truncation (`enable_truncation(max_length)`) keeps the </s> as SiglipTokenizer's
    `truncation=True, max_length=n` does. No padding: SigLIP's padding to max_length is the caller's.
    """
    proto = _read_model(checkpoint_dir / SPIECE)
    config = _read_config(checkpoint_dir / CONFIG)
    vocab = [(piece.piece, piece.score) for piece in proto.pieces]
    special = _special_tokens(config, vocab, checkpoint_dir / CONFIG)
    tokenizer = Tokenizer(Unigram(vocab, _unk_id(proto, checkpoint_dir / SPIECE), byte_fallback=False))
    tokenizer.normalizer = _normalizer(bool(config["do_lower_case"]), proto.normalizer_spec.precompiled_charsmap)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE_SYMBOL, prepend_scheme="never", split=False)
    tokenizer.decoder = decoders.Metaspace(replacement=SPACE_SYMBOL, prepend_scheme="always", split=False)
    tokenizer.add_special_tokens([_added(token) for token in special])
    eos = config["eos_token"]
    tokenizer.post_processor = processors.TemplateProcessing(single=f"$A {eos}", special_tokens=[(eos, special[eos])])
    return tokenizer


def _read_model(path: Path) -> Any:
    """spiece.model's protobuf, refused unless SentencePiece would tokenise it as the steps above assume."""
    from sentencepiece import sentencepiece_model_pb2

    if not path.is_file():
        raise ValueError(f"{path}: no SentencePiece model (a SigLIP checkpoint ships {SPIECE})")
    proto = sentencepiece_model_pb2.ModelProto()  # type: ignore[attr-defined]  # generated at import, no stub
    try:
        proto.ParseFromString(path.read_bytes())
    except Exception as error:  # protobuf's DecodeError, or anything a truncated file makes it raise
        raise ValueError(f"{path}: not a SentencePiece model ({type(error).__name__}: {error})") from error
    if not proto.pieces:
        raise ValueError(f"{path}: not a SentencePiece model (no pieces)")
    _check_model(proto, path)
    return proto


def _check_model(proto: Any, path: Path) -> None:
    """Refuse the SentencePiece options the conversion does not reproduce, naming each."""
    trainer, spec = proto.trainer_spec, proto.normalizer_spec
    refusals = {
        "trainer_spec.model_type (only unigram is converted)": trainer.model_type != UNIGRAM,
        "trainer_spec.byte_fallback": trainer.byte_fallback,
        "normalizer_spec.remove_extra_whitespaces = false": not spec.remove_extra_whitespaces,
        "normalizer_spec.escape_whitespaces = false": not spec.escape_whitespaces,
        "trainer_spec.treat_whitespace_as_suffix": trainer.treat_whitespace_as_suffix,
        "user-defined, unused or byte pieces": any(
            piece.type in (USER_DEFINED, UNUSED, BYTE) for piece in proto.pieces
        ),
        # SentencePiece never matches a control piece in text; Unigram would, unless the punctuation step removes it.
        "a control piece without ASCII punctuation": any(
            piece.type == CONTROL and not set(piece.piece) & set(string.punctuation) for piece in proto.pieces
        ),
    }
    for option, refused in refusals.items():
        if refused:
            raise ValueError(f"{path}: {option} is not converted to a tokenizer.json")


def _unk_id(proto: Any, path: Path) -> int:
    unknown = [index for index, piece in enumerate(proto.pieces) if piece.type == UNKNOWN]
    if len(unknown) != 1:
        raise ValueError(f"{path}: {len(unknown)} unknown pieces, expected one")
    return unknown[0]


def _read_config(path: Path) -> dict[str, Any]:
    """tokenizer_config.json with SiglipTokenizer's defaults filled in, refused where it asks for more."""
    if not path.is_file():
        raise ValueError(f"{path}: missing (a SigLIP checkpoint ships {CONFIG})")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: unreadable ({error})") from error
    if not isinstance(config, dict):
        raise ValueError(f"{path}: not a JSON object")
    _check_config(config, path)
    return {**DEFAULTS, **config}


def _check_config(config: dict[str, Any], path: Path) -> None:
    """Refuse each option SiglipTokenizer would tokenise differently with, and any option not known to be inert."""
    if config.get("tokenizer_class", "SiglipTokenizer") != "SiglipTokenizer":
        raise ValueError(f"{path}: tokenizer_class {config['tokenizer_class']!r} is not SiglipTokenizer")
    if not isinstance(config.get("do_lower_case", True), bool):
        raise ValueError(f"{path}: do_lower_case {config['do_lower_case']!r} is not true or false")
    for key in EMPTY_KEYS:
        if config.get(key):
            raise ValueError(f"{path}: {key} {config[key]!r} is not converted (only empty)")
    if config.get("truncation_side", "right") != "right":
        raise ValueError(f"{path}: truncation_side {config['truncation_side']!r} is not converted (only right)")
    if config.get("split_special_tokens", False):
        raise ValueError(f"{path}: split_special_tokens true is not converted")
    checked = {"tokenizer_class", "truncation_side", "split_special_tokens", *EMPTY_KEYS, *DEFAULTS}
    for key in config:
        if key not in INERT_KEYS | checked:
            raise ValueError(f"{path}: option {key} is not converted to a tokenizer.json")


def _special_tokens(config: dict[str, Any], vocab: list[tuple[str, float]], path: Path) -> dict[str, int]:
    """eos, unk and pad: each a piece of spiece.model (SiglipTokenizer would add any other as a new id)."""
    ids = {piece: index for index, (piece, _) in reversed(list(enumerate(vocab)))}
    special: dict[str, int] = {}
    for key in ("eos_token", "unk_token", "pad_token"):
        token = _content(config[key], key, path)
        if token not in ids:
            raise ValueError(f"{path}: {key} {token!r} is not a piece of {SPIECE}")
        config[key], special[token] = token, ids[token]
    _check_added(config.get("added_tokens_decoder") or {}, special, path)
    return special


def _content(token: Any, key: str, path: Path) -> str:
    if isinstance(token, dict) and isinstance(token.get("content"), str):
        token = token["content"]
    if not isinstance(token, str) or not token:
        raise ValueError(f"{path}: {key} {token!r} is not a token")
    return token


def _check_added(decoder: dict[str, Any], special: dict[str, int], path: Path) -> None:
    """added_tokens_decoder may only restate the special tokens, as SiglipTokenizer makes them."""
    expected = {"lstrip": True, "rstrip": True, "normalized": False, "single_word": False, "special": True}
    for index, token in decoder.items():
        content = token.get("content") if isinstance(token, dict) else None
        if not isinstance(content, str) or str(special.get(content)) != str(index):
            raise ValueError(f"{path}: added_tokens_decoder {index} {content!r} is not converted (not a special piece)")
        for flag, value in expected.items():
            if token.get(flag, value) != value:
                raise ValueError(f"{path}: added_tokens_decoder {index} {flag} {token[flag]!r} is not converted")


def _added(token: str) -> AddedToken:
    """SiglipTokenizer's special tokens: matched in the raw text, whitespace around them dropped."""
    return AddedToken(token, lstrip=True, rstrip=True, normalized=False, special=True)


def _normalizer(lower_case: bool, charsmap: bytes) -> normalizers.Normalizer:
    """SiglipTokenizer's canonicalisation, then SentencePiece's normalisation, in their order."""
    steps: list[normalizers.Normalizer] = [normalizers.Replace(SPACE_SYMBOL, " ")]
    if lower_case:
        steps += [normalizers.Replace(Regex(_FINAL_SIGMA), "\u03c2"), normalizers.Lowercase()]
    steps += [
        normalizers.Replace(Regex(_char_class(string.punctuation)), ""),
        normalizers.Replace(Regex(_char_class(_python_whitespace()) + "+"), " "),
    ]
    if charsmap:
        steps.append(normalizers.Precompiled(charsmap))
    steps += [normalizers.Replace(Regex(" {2,}"), " "), normalizers.Replace(Regex(r"\A +| +\z"), "")]
    return normalizers.Sequence([*steps, normalizers.Prepend(" ")])  # "▁" before each piece: see the docstring


# str.lower()'s Final_Sigma context: a cased letter, case-ignorables, Σ, and no case-ignorables then a cased letter.
_CASED = r"[\p{Cased}&&\P{Case_Ignorable}]"
_FINAL_SIGMA = rf"(?<={_CASED}\p{{Case_Ignorable}}*)\x{{3A3}}(?!\p{{Case_Ignorable}}*{_CASED})"


@functools.cache
def _python_whitespace() -> str:
    """The characters re's \\s matches in this Python (str.isspace): more than the regex engine's \\s."""
    return "".join(chr(code) for code in range(sys.maxunicode + 1) if chr(code).isspace())


def _char_class(characters: str) -> str:
    return "[" + "".join(f"\\x{{{ord(character):X}}}" for character in characters) + "]"
