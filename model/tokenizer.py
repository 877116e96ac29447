"""Tokenisation through the Hugging Face `tokenizers` library and a `tokenizer.json`.

Nothing here splits text by hand: any tokenizer.json (WordPiece, byte-level BPE, Unigram) behaves exactly
as its authors' does, post-processor (the family's single and pair templates) included, and a new
WordPiece vocabulary is trained with the library's own trainer (BERT normaliser and pre-tokeniser).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

import bundle.feeds

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def load_tokenizer(path: Path) -> Tokenizer:
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file not found: {path}")
    return Tokenizer.from_file(str(path))


def train_wordpiece(texts: Iterable[str], vocab_size: int = 8000, min_frequency: int = 2) -> Tokenizer:
    """Train a lower-cased BERT-style WordPiece tokenizer on `texts`."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=SPECIAL_TOKENS,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return tokenizer


def pad_id(tokenizer: Tokenizer) -> int:
    for token in ("[PAD]", "<pad>"):
        token_id = tokenizer.token_to_id(token)
        if token_id is not None:
            return token_id
    return 0


def truncating(tokenizer: Tokenizer, max_length: int) -> Tokenizer:
    """A copy of `tokenizer` that truncates to max_length and never pads; the caller's own stays as it was."""
    tok = Tokenizer.from_str(tokenizer.to_str())
    tok.no_padding()
    tok.enable_truncation(max_length)
    return tok


def token_ids(tokenizer: Tokenizer, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """Token ids per text, with special tokens, truncated to max_length, unpadded."""
    return [e.ids for e in truncating(tokenizer, max_length).encode_batch(list(texts))]


def pair_ids(
    tokenizer: Tokenizer, pairs: Sequence[tuple[str, str]], max_length: int,
) -> tuple[list[list[int]], list[list[int]]]:
    """(token ids, token type ids) per (text, text pair), through the tokenizer's own pair template (e.g.
    [CLS] A [SEP] B [SEP] or <s> A </s></s> B </s>), truncated longest-first to max_length, unpadded."""
    encodings = truncating(tokenizer, max_length).encode_batch(list(pairs))
    return [e.ids for e in encodings], [e.type_ids for e in encodings]


def pad_batch(sequences: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Id lists -> (input_ids, attention_mask), both (B, T) int64, right-padded: bundle.feeds.pad, the
    graphs' input contract, as tensors."""
    feeds = bundle.feeds.pad(sequences, pad)
    return torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"])  # (B, T), (B, T)


def encode(tokenizer: Tokenizer, texts: Sequence[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Texts -> (input_ids, attention_mask), both (B, T) int64, right-padded, truncated to max_length."""
    return pad_batch(token_ids(tokenizer, texts, max_length), pad_id(tokenizer))
