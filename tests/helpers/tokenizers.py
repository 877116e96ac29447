"""Tokenizers of the three kinds real checkpoints ship, trained offline on MULTILINGUAL in well under a second,
each with its family's special tokens (ids 0-4, as the configs in tests/helpers/families.py expect) and
post-processor:

    wordpiece         BERT's: lower-cased WordPiece, [CLS] A [SEP] B [SEP] with type ids 0 / 1
    wordpiece_fairseq MPNet's: WordPiece with <s> A </s></s> B </s> (RobertaProcessing)
    byte_level_bpe    RoBERTa's: byte-level BPE, <s> A </s></s> B </s> (RobertaProcessing)
    unigram           XLM-R's SentencePiece: Unigram over Metaspace words, <s> A </s> </s> B </s>
    modernbert_bpe    ModernBERT's: byte-level BPE with [CLS] A [SEP] B [SEP]
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from model.tokenizer import train_wordpiece

MULTILINGUAL = [
    "Café crème, naïve façade: déjà vu à Zürich and São Paulo.",
    "Привет, как дела? Москва и Санкт-Петербург.",
    "Καλημέρα κόσμε, η Αθήνα είναι όμορφη.",
    "مرحبا بالعالم، كيف حالك اليوم؟",
    "你好，世界！东京和北京都很大。",
    "こんにちは、世界。カタカナとひらがな。",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "Emoji time 😀🎉👍🏽 and 🇫🇷 flags, e-mail: a.b@example.com",
    "The quick brown fox jumps over the lazy dog 123 times.",
    "  spaces   inside\tand\nnew lines  ",
]
FAIRSEQ_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # ids 0..4: pad 1, as RoBERTa, XLM-R and MPNet
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4: pad 0


def wordpiece(vocab_size: int = 300) -> Tokenizer:
    return train_wordpiece(MULTILINGUAL * 3, vocab_size=vocab_size, min_frequency=1)


def wordpiece_fairseq(vocab_size: int = 300) -> Tokenizer:
    """MPNet's vocabulary has both <unk> (id 3) and the [UNK] its WordPiece model and tokenizer class use."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=1,
                                        special_tokens=[*FAIRSEQ_SPECIALS, "[UNK]"])
    tokenizer.train_from_iterator(MULTILINGUAL * 3, trainer=trainer)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return tokenizer


def _byte_level(vocab_size: int, specials: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(MULTILINGUAL * 3, trainer=trainer)
    return tokenizer


def byte_level_bpe(vocab_size: int = 400) -> Tokenizer:
    tokenizer = _byte_level(vocab_size, FAIRSEQ_SPECIALS)
    tokenizer.post_processor = processors.RobertaProcessing(
        ("</s>", 2), ("<s>", 0), trim_offsets=True, add_prefix_space=False)
    return tokenizer


def modernbert_bpe(vocab_size: int = 400) -> Tokenizer:
    tokenizer = _byte_level(vocab_size, BERT_SPECIALS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tokenizer


def unigram(vocab_size: int = 300) -> Tokenizer:
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=FAIRSEQ_SPECIALS, unk_token="<unk>")
    tokenizer.train_from_iterator(MULTILINGUAL * 3, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return tokenizer
