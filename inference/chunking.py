"""Long inputs as overlapping windows, and the pooling of the windows' answers. Plain functions (no
asyncio, no HTTP), so served models and the corpus job cut, check and pool the same way.

A text's content tokens (its tokens without the special ones) are cut into windows of
W = max_length - S tokens, S being the special tokens the tokenizer's post-processor adds ([CLS] and
[SEP] for BERT: 2), starting at token 0, W - N, 2(W - N), ... for an overlap of N tokens (0 <= N < W);
the last window is the first one that reaches the end of the text, and may be shorter. Cutting and
wrapping are the `tokenizers` library's own (`Encoding.truncate` with a stride, then the tokenizer's
post-processor), so each window is exactly what the tokenizer makes of that stretch of text, and a text
of at most W tokens makes one window: its usual encoding. Token-id inputs are used as given (nothing is
added), so they are cut into windows of max_length ids, and their spans count tokens, not characters.

With a prompt (`inference.prompts`), every window is read as the prompted text would be: the prompt and the text
are tokenised as one string, the prompt's P tokens split off (`TextTokenizer.split_prompt`), the text's tokens
cut into windows of W - P, and the prompt's tokens put back at the start of each window's content; a text of
at most W - P tokens makes one window, its prompted encoding. Spans and weights count the text's tokens and
characters only.

Pooling: the mean of the windows' outputs weighted by each window's content-token count, in float64,
taken on the graph's pooled vectors before normalisation (or on logits before softmax). One window is
returned unchanged, bit for bit.

Shape letters: K windows of one input, D hidden (or C labels).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from tokenizers import Encoding

from inference.errors import InputTooLong, OutOfRange
from inference.tokenize import Encoded, TextTokenizer

DEFAULT_OVERLAP = 32  # tokens shared by neighbouring windows
Mode = Literal["mean", "windows"]  # mean: one answer per input, pooled over its windows; windows: each window's


@dataclass(frozen=True)
class Chunking:
    """Inputs cut into windows instead of truncated: how their answers are given, and the overlap."""

    mode: Mode
    overlap: int = DEFAULT_OVERLAP


@dataclass(frozen=True)
class Window:
    ids: np.ndarray  # (n,) int64, special tokens included: what the graph runs
    start: int  # span of the window's content in the input: characters of a text, positions of token ids
    stop: int
    tokens: int  # content tokens (special tokens excluded): the window's weight in the mean

    @property
    def length(self) -> int:
        return int(self.ids.shape[0])


def window_size(tokenizer: TextTokenizer, text: bool = True) -> int:
    """Content tokens per window: the max length less the special tokens added to a text."""
    return tokenizer.max_length - (tokenizer.special_count if text else 0)


def count_windows(tokens: int, size: int, overlap: int) -> int:
    """How many windows of `size` tokens, `overlap` shared, cover `tokens` content tokens."""
    if tokens <= size:
        return 1
    step = size - overlap
    return 1 + (tokens - size + step - 1) // step


def cut(
    tokenizer: TextTokenizer, inputs: Sequence[Any], overlap: int, max_windows: int, prompt: str = "",
) -> list[list[Window]]:
    """Per input, its windows in order (texts after `prompt`). Refuses an overlap outside [0, W) (W - P with a
    prompt of P tokens) and an input that would make more than `max_windows` windows (before any window is
    built). CPU-bound: callers keep it off an event loop."""
    text = isinstance(inputs[0], str)
    size = window_size(tokenizer, text)
    check_overlap(tokenizer, overlap, text)
    if not text:
        sequences = [tokenizer.checked_ids(index, ids) for index, ids in enumerate(inputs)]
        _check_counts([len(ids) for ids in sequences], [size] * len(sequences), overlap, max_windows)
        return [_id_windows(ids, size, overlap) for ids in sequences]
    encodings = tokenizer.content(inputs, prompt)
    prompts = [tokenizer.split_prompt(e, len(prompt)) if prompt else None for e in encodings]
    sizes = [size - (p.length if p is not None else 0) for p in prompts]
    _check_prompted_overlap(tokenizer, overlap, sizes)
    _check_counts([len(e.ids) for e in encodings], sizes, overlap, max_windows)
    return [_text_windows(tokenizer, e, s, overlap, p, len(prompt))
            for e, s, p in zip(encodings, sizes, prompts, strict=True)]


def pool(values: np.ndarray, windows: Sequence[Window]) -> np.ndarray:
    """(K, D) outputs of one input's windows -> (D,): their mean weighted by content tokens."""
    weights = np.asarray([w.tokens for w in windows], dtype=np.float64)  # (K,)
    if weights.sum() == 0:  # a text without content tokens: one window of special tokens only
        weights[:] = 1.0
    weights /= weights.sum()
    return (weights @ values.astype(np.float64)).astype(np.float32)  # (D,)


def regroup(outputs: Sequence[Any], windows: Sequence[Sequence[Window]]) -> list[list[Any]]:
    """A flat list of per-window results, in window order -> one list per input."""
    grouped, at = [], 0
    for input_windows in windows:
        grouped.append(list(outputs[at: at + len(input_windows)]))
        at += len(input_windows)
    if at != len(outputs):
        raise ValueError(f"{len(outputs)} results for {at} windows")
    return grouped


def check_overlap(tokenizer: TextTokenizer, overlap: int, text: bool = True, prompt: int = 0) -> None:
    """OutOfRange unless 0 <= overlap < W (less `prompt` tokens kept for a prompt): the windows must advance."""
    size = window_size(tokenizer, text) - prompt
    if not 0 <= overlap < size:
        added = f" less its {tokenizer.special_count} special tokens" if text else ""
        kept = f" and {prompt} tokens kept for its prompt" if prompt else ""
        raise OutOfRange(
            f"chunk_overlap must be at least 0 and below the window of {size} tokens "
            f"(the model's max length of {tokenizer.max_length}{added}{kept})"
        )


def too_many_windows(tokens: int, size: int, overlap: int, max_windows: int) -> str | None:
    """Why an input of `tokens` content tokens is refused for making more than `max_windows` windows (None: it
    is not), counted before any window is built."""
    count = count_windows(tokens, size, overlap)
    if count <= max_windows:
        return None
    return f"{tokens} tokens make {count} windows, over the limit of {max_windows} windows per input"


def _check_counts(token_counts: Sequence[int], sizes: Sequence[int], overlap: int, max_windows: int) -> None:
    for index, (tokens, size) in enumerate(zip(token_counts, sizes, strict=True)):
        if (reason := too_many_windows(tokens, size, overlap, max_windows)) is not None:
            raise InputTooLong(f"input {index}: {reason} (ATTNSERVE_MAX_WINDOWS_PER_INPUT)")


def _check_prompted_overlap(tokenizer: TextTokenizer, overlap: int, sizes: Sequence[int]) -> None:
    """OutOfRange unless the windows left beside the prompt's tokens still advance."""
    size = min(sizes)
    if overlap >= size:
        prompt = window_size(tokenizer) - size
        raise OutOfRange(f"chunk_overlap must be below the window of {size} tokens: the model's max length of "
                         f"{tokenizer.max_length} less its {tokenizer.special_count} special tokens and the "
                         f"prompt's {prompt}")


def _text_windows(tokenizer: TextTokenizer, encoding: Encoding, size: int, overlap: int,
                  prompt: Encoded | None = None, shift: int = 0) -> list[Window]:
    """A text's windows; with the prompt's tokens (split off `encoding`, of `shift` characters) in each."""
    count = count_windows(len(encoding.ids), size, overlap)
    encoding.truncate(size, stride=overlap)  # in place: the first window; the others in .overflowing
    wrapped = tokenizer.wrap(encoding)
    windows = [wrapped, *wrapped.overflowing]
    if prompt is None:
        return [_text_window(w) for w in windows]
    return [_prompted(_text_window(w), prompt, tokenizer.lead, shift) for w in windows[:count]]  # see split_prompt


def _text_window(encoding: Encoding) -> Window:
    content = [i for i, sequence in enumerate(encoding.sequence_ids) if sequence is not None]
    start, stop = (encoding.offsets[content[0]][0], encoding.offsets[content[-1]][1]) if content else (0, 0)
    return Window(np.asarray(encoding.ids, dtype=np.int64), int(start), int(stop), len(content))


def _prompted(window: Window, prompt: Encoded, at: int, shift: int) -> Window:
    """The window with the prompt's tokens after its `at` opening special tokens; its span in the text's own
    characters (a token may start in the prompt: a leading space)."""
    ids = np.concatenate([window.ids[:at], prompt.ids, window.ids[at:]])
    return Window(ids, max(window.start - shift, 0), max(window.stop - shift, 0), window.tokens)


def _id_windows(ids: list[int], size: int, overlap: int) -> list[Window]:
    count, step = count_windows(len(ids), size, overlap), size - overlap
    starts = [k * step for k in range(count)]
    return [_id_window(ids, a, min(a + size, len(ids))) for a in starts]


def _id_window(ids: list[int], start: int, stop: int) -> Window:
    return Window(np.asarray(ids[start:stop], dtype=np.int64), start, stop, stop - start)
