"""Tokenisation with the bundle's `tokenizer.json` through Hugging Face `tokenizers` (never by hand).

Texts are encoded in batches (`encode_batch`, which runs in Rust threads without the GIL); a served model
calls this on the event loop for small requests and in its executor otherwise. Truncation keeps the
special tokens and cuts from the right or the left; with truncation off, an input longer than the
model's max length is refused, naming the limit. Text pairs (a query and a document) go through the
tokenizer's own pair template ([CLS] A [SEP] B [SEP] with type ids 0 / 1, or <s> A </s></s> B </s>), truncated
longest-first as transformers' tokenizers do by default; an LLM reranker's pairs are written as one text by its
manifest's `pair_format` instead (its prompt around them), then tokenised as one sequence, cut from the end, and
wrapped in the template's prefix and suffix by the post-processor, as its authors' scoring code does. For
chunking (`inference.chunking`) the whole text is encoded without special tokens, and each window is wrapped in
them by the tokenizer's post-processor.
`load_tokenizer` is the one loader of a bundle's tokenizer (the service, the corpus job and the bench use it).

A prompt (`inference.prompts`) is prepended to the text, and the two are tokenised as one string, as
sentence-transformers does (so a byte-level BPE or Unigram tokenizer merges across the seam exactly as there);
cut from the right, that is sentence-transformers' encoding. What must keep the prompt while cutting elsewhere
(truncation from the left, every window of a chunked text) splits the string's tokens at the prompt's end:
the prompt's tokens are those that end within its characters (`split_prompt`), and they are put back right
after the special tokens that open a sequence (the post-processor's `lead` tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from tokenizers import Encoding, Tokenizer

from bundle.manifest import Manifest
from inference.errors import InputTooLong, InvalidRequest, OutOfRange, StartupError

Direction = Literal["right", "left"]
Pair = tuple[str, str]  # (text, text pair): a query and a document


Pieces = tuple[list[str], list[tuple[int, int]], list[bool]]  # tokens, character offsets, special flags


@dataclass(frozen=True)
class Encoded:
    """One input's token ids, and, read from the library's encoding only when asked (/tokenize, /attention),
    its tokens, character offsets and special flags: building those lists for every text of a 64-text
    embedding request cost more than tokenising it, on the event loop or holding the interpreter's lock.
    A sequence put together from others (a prompt put back after the opening special tokens) holds its
    lists itself (`pieces`)."""

    ids: np.ndarray  # (T,) int64
    encoding: Encoding | None = None  # None: token-id inputs, a sequence put together, or ids from the cache
    pieces: Pieces | None = None
    types: np.ndarray | None = None  # (T,) token types set apart from the encoding's (a chunked pair's windows)

    @property
    def length(self) -> int:
        return int(self.ids.shape[0])

    @property
    def tokens(self) -> list[str]:
        if self.pieces is not None:
            return self.pieces[0]
        return list(self.encoding.tokens) if self.encoding is not None else [""] * self.length

    @property
    def offsets(self) -> list[tuple[int, int]]:
        """Character offsets into the input text; (0, 0) for special tokens and token-id inputs."""
        if self.pieces is not None:
            return self.pieces[1]
        if self.encoding is None:
            return [(0, 0)] * self.length
        return [(int(a), int(b)) for a, b in self.encoding.offsets]

    @property
    def type_ids(self) -> np.ndarray | None:
        """(T,) int64 token types (the pair template's segments); None: all 0 (token-id inputs, a prompted text)."""
        if self.types is not None:
            return self.types
        return np.asarray(self.encoding.type_ids, dtype=np.int64) if self.encoding is not None else None

    @property
    def sequence_ids(self) -> list[int | None] | None:
        """Per token: 0 the first text, 1 a pair's second, None a special token; None when not known."""
        return list(self.encoding.sequence_ids) if self.encoding is not None and self.pieces is None else None

    @property
    def special(self) -> list[bool]:
        if self.pieces is not None:
            return self.pieces[2]
        if self.encoding is None:
            return [False] * self.length
        return [bool(s) for s in self.encoding.special_tokens_mask]


class TextTokenizer:
    def __init__(self, tokenizer: Tokenizer, max_length: int, pair_format: str | None = None) -> None:
        self.max_length, self.pair_format = max_length, pair_format
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.special_count = tokenizer.num_special_tokens_to_add(is_pair=False)  # what the post-processor adds
        self.pair_special_count = tokenizer.num_special_tokens_to_add(is_pair=True)
        self._by_direction = {d: _truncating_copy(tokenizer, max_length, d) for d in ("right", "left")}
        self._plain = _truncating_copy(tokenizer, max_length, "right")
        self._plain.no_truncation()
        self.lead = _lead(self._plain)  # special tokens before a sequence's first content token ([CLS], <s>: 1)

    @property
    def subword_prefix(self) -> str | None:
        """The model's continuing-subword prefix (WordPiece's "##"): words are then known from the tokens."""
        return getattr(self._plain.model, "continuing_subword_prefix", None)

    @property
    def unk_id(self) -> int | None:
        token = getattr(self._plain.model, "unk_token", None)
        return self._plain.token_to_id(token) if token else None

    def tokens_to_text(self, tokens: Sequence[str]) -> str:
        """Tokens joined as the tokenizer's decoder joins them (transformers' convert_tokens_to_string)."""
        decoder = self._plain.decoder
        return decoder.decode(list(tokens)) if decoder is not None else " ".join(tokens)

    @property
    def truncating(self) -> Tokenizer:
        """The `tokenizers` tokenizer itself, cutting from the right at the max length and never padding (for
        callers that batch-encode on their own: the bench's raw engine, the naive server)."""
        return self._by_direction["right"]

    def encode(self, texts: Sequence[str], truncate: bool, direction: Direction = "right",
               prompt: str = "") -> list[Encoded]:
        """Each text (after `prompt`) with its special tokens, cut to the max length from `direction`'s end;
        cut from the left, a prompted text keeps its prompt and loses the start of the text."""
        batch = self._by_direction[direction].encode_batch(_prompted(prompt, texts))
        _check_overflow(batch, truncate, self.max_length, " with its prompt" if prompt else "")
        if prompt and direction == "left":
            return [self._left_keeping(prompt, text) if encoding.overflowing else encoded(encoding)
                    for encoding, text in zip(batch, texts, strict=True)]
        return [encoded(e) for e in batch]

    def encode_pairs(
        self, pairs: Sequence[Pair | str], truncate: bool, direction: Direction = "right",
    ) -> list[Encoded]:
        """Each (text, text pair) through the pair template, with its type ids and sequence ids (a lone text
        among them through the single template); with a pair_format, each pair written as one text first."""
        batch = self._by_direction[direction].encode_batch([p if isinstance(p, str) else self._pair(p) for p in pairs])
        _check_overflow(batch, truncate, self.max_length)
        return [encoded(e) for e in batch]

    def _pair(self, pair: Pair) -> Pair | str:
        if self.pair_format is None:
            return tuple(pair)  # type: ignore[return-value]
        return self.pair_format.replace("{query}", pair[0]).replace("{document}", pair[1])

    def encode_ids(self, texts: Sequence[str], direction: Direction = "right", prompt: str = "") -> list[np.ndarray]:
        """(T,) int64 ids per text, cut as `encode(truncate=True)` cuts them, and nothing else: for the corpus
        job, where building tokens, offsets and masks per text would cost more than tokenising."""
        if prompt and direction == "left":
            return [e.ids for e in self.encode(texts, True, direction, prompt)]
        batch = self._by_direction[direction].encode_batch(_prompted(prompt, texts))
        return [np.asarray(e.ids, dtype=np.int64) for e in batch]

    def split_prompt(self, encoding: Encoding, chars: int) -> Encoded:
        """The prompt's tokens at the start of `encoding` (the content tokens of a prompt of `chars` characters
        and a text): those ending within the prompt. `encoding` keeps the text's tokens (cut in place; the
        prompt's are left in its `overflowing`, which a caller that cuts it again must not read as a window)."""
        whole = encoded(encoding)
        count = next((i for i, (_, stop) in enumerate(whole.offsets) if stop > chars), whole.length)
        prompt = _sliced(whole, 0, count)  # read before the cut below changes the encoding `whole` reads
        if count:
            encoding.truncate(whole.length - count, direction="left")
        return prompt

    def with_prompt(self, wrapped: Encoded, prompt: Encoded) -> Encoded:
        """A wrapped sequence with the prompt's tokens put right after its opening special tokens."""
        at = self.lead
        return Encoded(np.concatenate([wrapped.ids[:at], prompt.ids, wrapped.ids[at:]]), pieces=(
            [*wrapped.tokens[:at], *prompt.tokens, *wrapped.tokens[at:]],
            [*wrapped.offsets[:at], *prompt.offsets, *wrapped.offsets[at:]],
            [*wrapped.special[:at], *prompt.special, *wrapped.special[at:]],
        ))

    def _left_keeping(self, prompt: str, text: str) -> Encoded:
        """`prompt + text` cut from the left to the max length, the prompt kept whole."""
        content = self._plain.encode(prompt + text, add_special_tokens=False)
        prefix = self.split_prompt(content, len(prompt))
        room = self.max_length - self.special_count - prefix.length
        if room <= 0:
            raise InputTooLong(f"the prompt takes {prefix.length} tokens, leaving no room for the text in the "
                               f"model's max length of {self.max_length} tokens")
        content.truncate(room, direction="left")
        return self.with_prompt(encoded(self._plain.post_process(content)), prefix)

    def encode_plain(self, texts: Sequence[str], add_special_tokens: bool) -> list[Encoded]:
        """For /tokenize: the whole input, no truncation."""
        return [encoded(e) for e in self._plain.encode_batch(list(texts), add_special_tokens=add_special_tokens)]

    def content(self, texts: Sequence[str], prompt: str = "") -> list[Encoding]:
        """Whole texts (after `prompt`) as `tokenizers` encodings, without special tokens or truncation (for
        chunking)."""
        return self._plain.encode_batch(_prompted(prompt, texts), add_special_tokens=False)

    def wrap(self, encoding: Encoding, pair: Encoding | None = None) -> Encoding:
        """`encoding` and each of its overflowing windows wrapped in the post-processor's special tokens; with
        `pair`, each window of `pair` after `encoding` (which must not overflow) in the pair template."""
        return self._plain.post_process(encoding, pair)

    def decode(self, sequences: Sequence[Sequence[int]], skip_special_tokens: bool) -> list[str]:
        lists = [self.checked_ids(index, ids) for index, ids in enumerate(sequences)]
        return self._plain.decode_batch(lists, skip_special_tokens=skip_special_tokens)

    def checked_ids(self, index: int, ids: Sequence[int]) -> list[int]:
        """`ids` as a list, refused unless non-empty and within the vocabulary."""
        if not ids:
            raise InvalidRequest(f"input {index} is an empty list of token ids")
        if min(ids) < 0 or max(ids) >= self.vocab_size:
            raise OutOfRange(f"input {index} has token ids outside the vocabulary [0, {self.vocab_size})")
        return list(ids)

    def from_ids(self, sequences: Sequence[Sequence[int]], truncate: bool, direction: Direction) -> list[Encoded]:
        """Token-id inputs are used as given (no special tokens added); ids must be in the vocabulary."""
        return [self._one_from_ids(index, ids, truncate, direction) for index, ids in enumerate(sequences)]

    def _one_from_ids(self, index: int, ids: Sequence[int], truncate: bool, direction: Direction) -> Encoded:
        ids = self.checked_ids(index, ids)
        if len(ids) > self.max_length:
            if not truncate:
                raise InputTooLong(
                    f"input {index} has {len(ids)} tokens, over the model's max length of {self.max_length}"
                )
            ids = ids[-self.max_length:] if direction == "left" else ids[: self.max_length]
        return Encoded(np.asarray(ids, dtype=np.int64))


def load_tokenizer(bundle_dir: Path, manifest: Manifest) -> TextTokenizer:
    """The bundle's tokenizer, truncating at its max length; StartupError names the file it cannot load."""
    name = manifest.input_file[0]  # a text model's: its tokenizer (bundle.manifest)
    try:
        tokenizer = Tokenizer.from_file(str(bundle_dir / name))
    except Exception as error:  # tokenizers raises a bare Exception; name the file, keep the reason
        reason = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        raise StartupError(f"{name}: the tokenizers library cannot load it: {reason}") from None
    return TextTokenizer(tokenizer, manifest.max_length, manifest.pair_format)


def _truncating_copy(tokenizer: Tokenizer, max_length: int, direction: Direction) -> Tokenizer:
    copy = Tokenizer.from_str(tokenizer.to_str())  # settings stay local to this copy
    copy.no_padding()
    copy.enable_truncation(max_length, direction=direction)
    return copy


def _prompted(prompt: str, texts: Sequence[str]) -> list[str]:
    return [prompt + text for text in texts] if prompt else list(texts)


def _lead(tokenizer: Tokenizer) -> int:
    """How many special tokens the post-processor puts before a single sequence's content."""
    wrapped = tokenizer.post_process(tokenizer.encode("a", add_special_tokens=False))
    return next((i for i, sequence in enumerate(wrapped.sequence_ids) if sequence is not None), 0)


def _check_overflow(batch: Sequence[Encoding], truncate: bool, max_length: int, what: str = "") -> None:
    """InputTooLong for the first encoding cut short when truncation is off."""
    for index, encoding in enumerate(batch):
        if encoding.overflowing and not truncate:
            raise InputTooLong(f"input {index}{what} is longer than the model's max length of {max_length} "
                               "tokens and truncation is off (set truncate=true to cut it)")


def _sliced(e: Encoded, start: int, stop: int) -> Encoded:
    return Encoded(e.ids[start:stop], pieces=(e.tokens[start:stop], e.offsets[start:stop], e.special[start:stop]))


def encoded(encoding: Encoding) -> Encoded:
    return Encoded(np.asarray(encoding.ids, dtype=np.int64), encoding)
