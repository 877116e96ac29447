"""Token ids and padded batches, against the tokenizers library's own truncation and padding."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer

from model.tokenizer import encode, pad_batch, pad_id, token_ids, train_wordpiece
from tests.helpers.tiny import SENTENCES

TEXTS = ["a warm and funny film", "ok", " ".join(SENTENCES)]  # the last is longer than max_length


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_wordpiece(SENTENCES, vocab_size=200, min_frequency=1)


def library_batch(tokenizer: Tokenizer, max_length: int) -> tuple[list[list[int]], list[list[int]]]:
    """What the tokenizers library itself gives with truncation and right padding on a copy."""
    tok = Tokenizer.from_str(tokenizer.to_str())
    tok.enable_truncation(max_length)
    tok.enable_padding(pad_id=pad_id(tok), pad_token="[PAD]")
    batch = tok.encode_batch(TEXTS)
    return [e.ids for e in batch], [e.attention_mask for e in batch]


def test_token_ids_truncate_and_keep_special_tokens(tokenizer: Tokenizer) -> None:
    full = [len(tokenizer.encode(t).ids) for t in TEXTS]
    ids = token_ids(tokenizer, TEXTS, 12)
    assert full[2] > 12 and [len(i) for i in ids] == [min(n, 12) for n in full]
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    assert all(i[0] == cls and i[-1] == sep for i in ids)


def test_encode_equals_the_librarys_truncation_and_padding(tokenizer: Tokenizer) -> None:
    input_ids, attention_mask = encode(tokenizer, TEXTS, 12)
    assert (input_ids.tolist(), attention_mask.tolist()) == library_batch(tokenizer, 12)
    assert input_ids.dtype == attention_mask.dtype == torch.int64


def test_the_callers_tokenizer_keeps_its_settings(tokenizer: Tokenizer) -> None:
    encode(tokenizer, TEXTS, 8)
    token_ids(tokenizer, TEXTS, 8)
    assert tokenizer.truncation is None and tokenizer.padding is None
    assert len(tokenizer.encode(TEXTS[2]).ids) > 8


def test_pad_batch_right_pads_and_masks() -> None:
    ids, mask = pad_batch([[5, 6, 7], [8]], pad=9)
    assert ids.tolist() == [[5, 6, 7], [8, 9, 9]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]


def test_pad_builds_exactly_the_inputs_a_graph_lists() -> None:
    """bundle.feeds.pad: token_type_ids from a pair's type ids (zeros when none are given) only when asked."""
    from bundle.feeds import pad

    names = ["input_ids", "attention_mask", "token_type_ids"]
    assert list(pad([[5, 6, 7], [8]], 0)) == names[:2]
    feeds = pad([[5, 6, 7], [8]], 0, names, type_ids=[[0, 1, 1], [0]])
    assert feeds["token_type_ids"].tolist() == [[0, 1, 1], [0, 0, 0]] and feeds["token_type_ids"].dtype == "int64"
    assert pad([[5, 6, 7]], 0, names)["token_type_ids"].tolist() == [[0, 0, 0]]
    with pytest.raises(ValueError, match="unknown graph input"):
        pad([[5]], 0, ["position_ids"])
