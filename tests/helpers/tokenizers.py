"""Tokenizers of the kinds real checkpoints ship, trained offline on MULTILINGUAL in well under a second (and
saved, so every run reads the same pieces: FROZEN), each with its family's special tokens (ids 0-4, as the
configs in tests/helpers/families.py expect) and post-processor:

    wordpiece         BERT's: lower-cased WordPiece, [CLS] A [SEP] B [SEP] with type ids 0 / 1
    wordpiece_fairseq MPNet's: WordPiece with <s> A </s></s> B </s> (RobertaProcessing)
    byte_level_bpe    RoBERTa's: byte-level BPE, <s> A </s></s> B </s> (RobertaProcessing)
    unigram           XLM-R's SentencePiece: Unigram over Metaspace words, <s> A </s> </s> B </s>
    modernbert_bpe    ModernBERT's: byte-level BPE with [CLS] A [SEP] B [SEP]
    qwen_bpe          Qwen3-Embedding's: Qwen's regex split, byte-level BPE, A B <|endoftext|> (specials at 0-2)
    gemma_bpe         Gemma's SentencePiece BPE with byte fallback, <bos> A <eos> <bos> B <eos> (EmbeddingGemma's;
                      specials <pad> <eos> <bos> <unk> <mask> at 0-4, as Gemma's)
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from model.tokenizer import train_wordpiece

# The trainers break ties between equally frequent pairs in the order of a Rust HashMap, which is seeded anew in
# every process: trained twice, a tokenizer can hold other pieces with other ids, and every random model built on
# it other numbers. So each tokenizer these helpers make at its default size is trained once, saved here, and read
# back by every run (`python -m tests.helpers.tokenizers` trains and saves them again).
FROZEN = Path(__file__).with_name("frozen")


def frozen(make: Callable[[], Tokenizer]) -> Callable[..., Tokenizer]:
    """`make` at its default arguments read from FROZEN/<its name>.json (trained when that file is missing);
    with other arguments, trained as asked."""
    @functools.wraps(make)
    def made(*args: object, **kwargs: object) -> Tokenizer:
        if args or kwargs:
            return make(*args, **kwargs)  # type: ignore[call-arg]
        path = FROZEN / f"{make.__name__}.json"
        return Tokenizer.from_file(str(path)) if path.is_file() else make()
    made.train = make  # type: ignore[attr-defined]  # the trainer itself, for saving the files again
    return made

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


@frozen
def wordpiece(vocab_size: int = 300) -> Tokenizer:
    return train_wordpiece(MULTILINGUAL * 3, vocab_size=vocab_size, min_frequency=1)


@frozen
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


@frozen
def byte_level_bpe(vocab_size: int = 400) -> Tokenizer:
    tokenizer = _byte_level(vocab_size, FAIRSEQ_SPECIALS)
    tokenizer.post_processor = processors.RobertaProcessing(
        ("</s>", 2), ("<s>", 0), trim_offsets=True, add_prefix_space=False)
    return tokenizer


@frozen
def modernbert_bpe(vocab_size: int = 400) -> Tokenizer:
    tokenizer = _byte_level(vocab_size, BERT_SPECIALS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tokenizer


@frozen
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


# Qwen2's (and Qwen3's) pre-tokenizer split, as its tokenizer.json writes it
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
                r"|\s+(?!\S)|\s+")
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0..2
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]  # ids 0..4, as Gemma's


@frozen
def qwen_bpe(vocab_size: int = 500) -> Tokenizer:
    """Qwen3-Embedding's pipeline: NFC, Qwen's regex split then bytes, byte-level BPE without an unknown token,
    and the post-processor its tokenizer.json carries (added by Qwen after release; transformers' Qwen2Tokenizer
    writes none): a ByteLevel offsets step, then a template that appends <|endoftext|> once, after a text or after
    a pair joined with nothing between ("$A <|endoftext|>", "$A $B <|endoftext|>", every type id 0)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=QWEN_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(MULTILINGUAL * 3, trainer=trainer)
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        processors.TemplateProcessing(single="$A:0 <|endoftext|>:0", pair="$A:0 $B:0 <|endoftext|>:0",
                                      special_tokens=[("<|endoftext|>", 0)])])
    return tokenizer


@frozen
def gemma_bpe(vocab_size: int = 600) -> Tokenizer:
    """Gemma's SentencePiece BPE: spaces as "▁", no pre-tokenizer, byte fallback to <0x00>..<0xFF> for characters
    outside the vocabulary (its alphabet here is kept small, so the emoji and rarer scripts fall back), and
    EmbeddingGemma's post-processor, the one transformers writes for add_bos_token and add_eos_token (its Gemma 3
    conversion sets both for the embedding model): <bos> A <eos>, and <bos> A <eos> <bos> B <eos> for a pair."""
    trained = Tokenizer(models.BPE())
    trained.normalizer = normalizers.Replace(" ", "▁")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, limit_alphabet=80,
                                  special_tokens=GEMMA_SPECIALS)
    trained.train_from_iterator(MULTILINGUAL * 3, trainer=trainer)
    model = json.loads(trained.to_str())["model"]
    learned = sorted((t for t in model["vocab"] if t not in GEMMA_SPECIALS), key=model["vocab"].get)
    vocab = {t: i for i, t in enumerate([*GEMMA_SPECIALS, *(f"<0x{b:02X}>" for b in range(256)), *learned])}
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    # the byte tokens are ordinary vocabulary entries, as in Gemma's (not special: decoding keeps them)
    tokenizer = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.add_special_tokens(GEMMA_SPECIALS)
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos>:0 $A:0 <eos>:0", pair="<bos>:0 $A:0 <eos>:0 <bos>:1 $B:1 <eos>:1",
        special_tokens=[("<bos>", 2), ("<eos>", 1)])
    return tokenizer


ALL = (wordpiece, wordpiece_fairseq, byte_level_bpe, modernbert_bpe, unigram, qwen_bpe, gemma_bpe)

if __name__ == "__main__":
    from tests.helpers.colbert import colbert_wordpiece
    from tests.helpers.tiny import tiny_wordpiece

    FROZEN.mkdir(exist_ok=True)
    for helper in (*ALL, tiny_wordpiece, colbert_wordpiece):
        helper.train().save(str(FROZEN / f"{helper.__name__}.json"))  # type: ignore[attr-defined]
