"""Starting points for training: a loaded model (a Hugging Face directory of any family, or our checkpoint) or
a fresh one.

    from_init     load_model(path), then give it a fresh classification head for our labels
                  (a head with the same kind and the same labels is kept, to continue training); the
                  "pooler" head is the family's own (own_head): an encoder's pooler, a decoder's bias-free
                  linear score on the last token;
    from_scratch  a WordPiece vocabulary trained on the training texts and a new Encoder;
    make_task     frozen encoder -> FeatureTask (head on cached features), else TextTask; texts are cut to
                  input_limit tokens.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from model.config import EncoderConfig
from model.encoder import Encoder
from model.families.decoders import DECODERS
from model.hf import is_hf_dir, sequence_head
from model.load import load_model
from model.tokenizer import pad_id, token_ids, train_wordpiece
from model.training.data import Dataset
from model.training.features import FeatureTask, extract_features
from model.training.loop import Split, Task, TextTask

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScratchSize:
    d_model: int = 256
    num_layers: int = 4
    num_heads: int = 4
    vocab_size: int = 8000


def from_init(path: Path, head: str, label_names: Sequence[str]) -> tuple[Encoder, Tokenizer]:
    loaded = load_model(path)
    log.info("loaded %s model from %s", loaded.kind, path)
    fields = own_head(Path(path), loaded.encoder.config) if head == "pooler" else {}
    return with_head(loaded.encoder, head, label_names, fields), loaded.tokenizer


def own_head(path: Path, config: EncoderConfig) -> dict[str, Any]:
    """The head fields `--head pooler` means: a Hugging Face directory's family head (model.hf.sequence_head). One of
    our checkpoints keeps the head fields it was saved with (a BERT trained with its pooler goes on with it), except
    a decoder's: its family's head is no pooler but the bias-free linear score on the last token, and a pooler there
    would read the first token, whose state under a causal mask has seen nothing but itself."""
    if is_hf_dir(path):
        return sequence_head(path)
    decoder = next((family for family in DECODERS if family.name == config.architecture), None)
    return decoder.head_config({}, "sequence") if decoder is not None else {}


def with_head(encoder: Encoder, head: str, label_names: Sequence[str], fields: dict[str, Any] | None = None) -> Encoder:
    """A copy of encoder's body under a head of the given kind for label_names (with the head's `fields`: its
    activation, norm, pooling; a family's own head may be of another kind, as the decoders' linear `score`)."""
    chosen = dict(head=head, num_labels=len(label_names), label_names=tuple(label_names))
    config = encoder.config.replace(**{**chosen, **(fields or {})})
    if config == encoder.config:
        return encoder  # same head, same labels: continue training it
    fresh = Encoder(config)
    body = {k: v for k, v in encoder.state_dict().items() if not k.startswith("head.")}
    missing, unexpected = fresh.load_state_dict(body, strict=False)
    if unexpected or any(not k.startswith("head.") for k in missing):
        raise ValueError(f"could not move the encoder body: missing {missing}, unexpected {unexpected}")
    return fresh


def from_scratch(texts: Sequence[str], size: ScratchSize, head: str, label_names: Sequence[str],
                 max_length: int) -> tuple[Encoder, Tokenizer]:
    tokenizer = train_wordpiece(texts, vocab_size=size.vocab_size)
    config = EncoderConfig(
        vocab_size=tokenizer.get_vocab_size(), d_model=size.d_model, num_heads=size.num_heads,
        num_layers=size.num_layers, d_ff=4 * size.d_model, max_length=max_length,
        pad_token_id=pad_id(tokenizer), head=head, num_labels=len(label_names), label_names=tuple(label_names),
    )
    log.info("new encoder: %d-token vocabulary, %d layers, d_model %d, %d heads",
             config.vocab_size, config.num_layers, config.d_model, config.num_heads)
    return Encoder(config), tokenizer


def freeze(encoder: Encoder) -> None:
    """Every weight but the head's stops learning."""
    for name, param in encoder.named_parameters():
        param.requires_grad = name.startswith("head.")


def input_limit(config: EncoderConfig, asked: int) -> int:
    """The longest input to train on: `asked`, cut to what the positions reach (config.position_limit): a position
    table's rows less RoBERTa's pad offset (its 514 rows hold 512 tokens), a decoder's max_position_embeddings."""
    return min(asked, config.position_limit)


def make_task(encoder: Encoder, tokenizer: Tokenizer, train: Dataset, val: Dataset, frozen: bool,
              batch_size: int, max_length: int, device: torch.device) -> Task:
    encoder.to(device)
    max_length = input_limit(encoder.config, max_length)
    train_ids, val_ids = token_ids(tokenizer, train.texts, max_length), token_ids(tokenizer, val.texts, max_length)
    pad = pad_id(tokenizer)
    if not frozen:
        return TextTask(encoder, Split(train_ids, train.labels), Split(val_ids, val.labels), batch_size, device, pad)
    freeze(encoder)
    encode_batch = 128
    train_x = extract_features(encoder, train_ids, pad, encode_batch, device)
    val_x = extract_features(encoder, val_ids, pad, encode_batch, device)
    return FeatureTask(encoder, Split(train_x, train.labels), Split(val_x, val.labels), batch_size, device)
