"""Tiny, deterministic models for tests: an attnserve checkpoint or a transformers BERT directory in well
under a second."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from model.checkpoint import save_checkpoint
from model.config import EncoderConfig
from model.encoder import Encoder
from model.tokenizer import train_wordpiece
from tests.helpers.tokenizers import frozen

SENTENCES = [
    "a warm and funny film", "the acting is wooden", "a delightful comedy with a great cast",
    "two hours i will never get back", "the soundtrack is wonderful", "the plot makes no sense",
    "a moving story about growing up", "boring and far too long", "the best film of the year",
    "the worst script i have read", "beautiful pictures and a clever plot", "dull characters and a dull plot",
    "i laughed and i cried", "i wanted to leave after ten minutes", "a small film with a big heart",
    "the dialogue is painful", "great performances all round", "a mess from start to finish",
    "the director knows what he is doing", "nothing happens for two hours", "sharp funny and smart",
    "predictable and lazy", "an instant classic", "a waste of a good cast",
    "the ending is perfect", "the ending is a letdown", "fresh and original", "stale and derivative",
    "numbers like 3 and 42 appear here", "attention heads look at tokens",
]
LABELS = ("neg", "pos")


def review_texts(count: int) -> list[str]:
    """`count` distinct texts made of SENTENCES, e.g. to calibrate a tiny model's int8 graph on."""
    pairs = [f"{a}, but {b}" for a in SENTENCES for b in SENTENCES if a != b]
    assert count <= len(pairs)
    return pairs[:count]


def tiny_config(head: bool = True, vocab_size: int = 200) -> EncoderConfig:
    return EncoderConfig(
        vocab_size=vocab_size, d_model=32, num_heads=2, num_layers=2, d_ff=64, max_length=64,
        dropout=0.0, attention_dropout=0.0, head_dropout=0.0,
        head="linear" if head else "none", num_labels=2 if head else 0, label_names=LABELS if head else (),
    )


# Wider and deeper than tiny, 128 tokens long, no head. small: its graph runs take most of a request's time, as a
# real model's do, unlike tiny's, where parsing and tokenising do (a 64 x 128 batch: about 0.2 s on one thread).
# medium: MiniLM's layers (6 x 384 wide, random weights, a 200-word vocabulary): a text costs what it costs a
# real encoder (tens of ms on one thread), so the work around the graph (HTTP, JSON, tokenising: about 1 ms
# a text) is a small part of serving it.
WIDER = {"small": {"d_model": 64, "d_ff": 256, "num_heads": 4, "num_layers": 4},
         "medium": {"d_model": 384, "d_ff": 1536, "num_heads": 12, "num_layers": 6}}


def wider_config(size: str, vocab_size: int) -> EncoderConfig:
    return tiny_config(head=False, vocab_size=vocab_size).replace(max_length=128, **WIDER[size])


def make_tiny_checkpoint(dir: Path, head: bool = True, size: str = "tiny", **changes: Any) -> Path:
    """A seeded tiny Encoder + WordPiece tokenizer trained on SENTENCES, saved at `dir`; returns `dir`. `size`
    small or medium: the wider_config model instead (no head), with the real MiniLM's tokenizer (30,522 word
    pieces: tokenising English costs what it costs a served model; the 200-piece one splits most words into
    letters, 1 ms a 128-token text). `changes` replace fields of the config (e.g. num_layers=3, num_heads=4)."""
    dir = Path(dir)
    tokenizer = tiny_wordpiece() if size == "tiny" else minilm_tokenizer()
    vocab = tokenizer.get_vocab_size()
    config = (tiny_config(head, vocab_size=vocab) if size == "tiny" else wider_config(size, vocab)).replace(**changes)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        encoder = Encoder(config).eval()
    save_checkpoint(dir, encoder, tokenizer)
    return dir


@frozen
def tiny_wordpiece() -> Tokenizer:
    """The tiny models' WordPiece: 200 pieces trained on SENTENCES (saved: tests.helpers.tokenizers.FROZEN)."""
    return train_wordpiece(SENTENCES, vocab_size=200, min_frequency=1)


def minilm_tokenizer() -> Tokenizer:
    from model.training.assets import minilm_dir  # the real MiniLM's files, installed with the project

    return Tokenizer.from_file(str(minilm_dir(verify=False) / "tokenizer.json"))


def make_tiny_hf_bert(directory: Path) -> Path:
    """A seeded 2-layer BertForSequenceClassification plus a tokenizer.json, HF directory layout."""
    from transformers import BertConfig, BertForSequenceClassification

    tokenizer = tiny_wordpiece()
    config = BertConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, id2label={0: "neg", 1: "pos"},
        label2id={"neg": 0, "pos": 1},
    )
    with torch.random.fork_rng():
        torch.manual_seed(1)
        model = BertForSequenceClassification(config).eval()
    model.save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory
