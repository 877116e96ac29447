"""Any tokenizer.json: WordPiece, byte-level BPE and Unigram, each with its family's pair template, give the
token ids (and type ids) of transformers' own tokenizer class for that family, on text in several scripts
with emoji, for single texts and pairs, whole and truncated. The tokenizers are trained offline in
tests/helpers/tokenizers.py; transformers builds its tokenizer from the same tokenizer.json and applies
its family's template, so a template of ours that differed would show here."""

from __future__ import annotations

import pytest
import transformers
from tokenizers import Tokenizer

from model.tokenizer import load_tokenizer, pair_ids, token_ids
from tests.helpers import tokenizers as kinds

PAIRS = list(zip(kinds.MULTILINGUAL, kinds.MULTILINGUAL[1:] + kinds.MULTILINGUAL[:1], strict=True))
CASES = {  # kind: (builder, transformers class, how a pair is joined: the ids between A and B)
    "wordpiece": (kinds.wordpiece, transformers.BertTokenizerFast, ["[SEP]"]),
    "byte-level-bpe": (kinds.byte_level_bpe, transformers.RobertaTokenizerFast, ["</s>", "</s>"]),
    "unigram": (kinds.unigram, transformers.XLMRobertaTokenizerFast, ["</s>", "</s>"]),
    "wordpiece-fairseq": (kinds.wordpiece_fairseq, transformers.MPNetTokenizerFast, ["</s>", "</s>"]),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Tokenizer, object, list]:
    build, cls, joint = CASES[request.param]
    path = tmp_path_factory.mktemp(request.param) / "tokenizer.json"
    build().save(str(path))
    return load_tokenizer(path), cls(tokenizer_file=str(path)), joint  # type: ignore[operator]


@pytest.mark.parametrize("max_length", [512, 12])
def test_single_texts_match_transformers(case: tuple, max_length: int) -> None:
    ours, reference, _ = case
    expected = reference(kinds.MULTILINGUAL, truncation=True, max_length=max_length)["input_ids"]
    assert token_ids(ours, kinds.MULTILINGUAL, max_length) == expected


@pytest.mark.parametrize("max_length", [512, 16])
def test_pairs_match_transformers_with_the_family_template(case: tuple, max_length: int) -> None:
    ours, reference, joint = case
    ids, type_ids = pair_ids(ours, PAIRS, max_length)
    expected = reference([a for a, _ in PAIRS], [b for _, b in PAIRS], truncation=True, max_length=max_length)
    assert ids == expected["input_ids"]
    if "token_type_ids" in expected:
        assert type_ids == expected["token_type_ids"]
    if max_length == 512:  # whole: A's tokens, then the family's joint (e.g. </s></s>), then B's
        first = len(ours.encode(PAIRS[0][0], add_special_tokens=False).ids)
        assert ids[0][1 + first: 1 + first + len(joint)] == [ours.token_to_id(t) for t in joint]


def test_every_script_is_tokenised_not_dropped(case: tuple) -> None:
    """Each multilingual text keeps tokens beyond its special tokens (a byte-level BPE never needs <unk>)."""
    ours, _, _ = case
    assert all(len(ids) > 2 for ids in token_ids(ours, kinds.MULTILINGUAL, 512))


def test_byte_level_bpe_round_trips_emoji() -> None:
    tokenizer, text = kinds.byte_level_bpe(), kinds.MULTILINGUAL[7]
    assert tokenizer.decode(tokenizer.encode(text).ids) == text
