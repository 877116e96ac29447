"""Tokenisation through the Hugging Face `tokenizers` library and a `tokenizer.json`.

Nothing here splits text by hand: loaded tokenizers behave exactly as their authors' do, and a new
WordPiece vocabulary is trained with the library's own trainer (BERT normaliser and pre-tokeniser).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

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


def encode(tokenizer: Tokenizer, texts: Sequence[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Texts -> (input_ids, attention_mask), both (B, T) int64, right-padded, truncated to max_length."""
    tok = Tokenizer.from_str(tokenizer.to_str())  # a copy: padding/truncation settings stay local
    tok.enable_truncation(max_length)
    tok.enable_padding(pad_id=pad_id(tok), pad_token=tok.id_to_token(pad_id(tok)) or "[PAD]")
    batch = tok.encode_batch(list(texts))
    ids = torch.tensor([e.ids for e in batch], dtype=torch.long)
    mask = torch.tensor([e.attention_mask for e in batch], dtype=torch.long)
    return ids, mask
