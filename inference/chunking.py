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

Text pairs (a query and a long document, for reranking) are cut on the document only: the query's content
tokens (at most half the room, else the request is refused) are repeated in every window, so each window
holds W = max_length - S_pair - (the query's tokens) tokens of the document, S_pair being the special tokens
of the pair template (3 for BERT, 4 for RoBERTa); its span is in the document's characters.

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

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from tokenizers import Encoding

from inference.errors import InputTooLong, OutOfRange
from inference.runtime.graphs import TokenSequence
from inference.runtime.tokenize import Encoded, Pair, TextTokenizer, encoded

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
    type_ids: np.ndarray | None = None  # (n,) a pair window's token types
    encoded: Encoded | None = None  # a pair window's tokens: offsets (into the document), sequence ids

    @property
    def length(self) -> int:
        return int(self.ids.shape[0])

    @property
    def sequence(self) -> TokenSequence:
        """What the graph runs: its ids, with a pair window's type ids."""
        return TokenSequence.of(self.ids, self.type_ids)


def window_size(tokenizer: TextTokenizer, text: bool = True) -> int:
    """Content tokens per window: the max length less the special tokens added to a text."""
    return tokenizer.max_length - (tokenizer.special_count if text else 0)


def default_overlap(size: int) -> int:
    """The overlap of a request that names none, for windows of `size` tokens: DEFAULT_OVERLAP, or half the
    window when DEFAULT_OVERLAP does not fit in it (a test-sized model), so the windows still advance."""
    return DEFAULT_OVERLAP if size > DEFAULT_OVERLAP else size // 2


def count_windows(tokens: int, size: int, overlap: int) -> int:
    """How many windows of `size` tokens, `overlap` shared, cover `tokens` content tokens."""
    if tokens <= size:
        return 1
    step = size - overlap
    return 1 + (tokens - size + step - 1) // step


def cut(
    tokenizer: TextTokenizer, inputs: Sequence[Any], overlap: int, max_windows: int, prompt: str = "",
    keep_tokens: bool = False,
) -> list[list[Window]]:
    """Per input, its windows in order (texts after `prompt`; with `keep_tokens`, a text window keeps its
    tokens: `Window.encoded`, which a prompted window does not offer). Refuses an overlap outside [0, W) (W - P
    with a prompt of P tokens) and an input that would make more than `max_windows` windows (before any
    window is built). CPU-bound: callers keep it off an event loop."""
    if prompt and keep_tokens:
        raise ValueError("a prompted window keeps no tokens: its offsets would count the prompt's characters")
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
    return [_text_windows(tokenizer, e, s, overlap, keep_tokens, p, len(prompt))
            for e, s, p in zip(encodings, sizes, prompts, strict=True)]


def cut_pairs(tokenizer: TextTokenizer, pairs: Sequence[Pair], overlap: int, max_windows: int) -> list[list[Window]]:
    """Per (query, document), the document's windows, each after the query in the pair template. Refuses a
    query over half the room, an overlap outside [0, W) and a document of more than `max_windows` windows,
    before any window is built."""
    queries = tokenizer.content([query for query, _ in pairs])
    documents = tokenizer.content([document for _, document in pairs])
    sizes = [pair_window_size(tokenizer, len(q.ids), index) for index, q in enumerate(queries)]
    for index, (size, document) in enumerate(zip(sizes, documents, strict=True)):
        if not 0 <= overlap < size:
            raise OutOfRange(f"chunk_overlap must be at least 0 and below the {size} document tokens a window of "
                             f"input {index} holds (the max length less the special tokens and the query)")
        if (reason := too_many_windows(len(document.ids), size, overlap, max_windows)) is not None:
            raise InputTooLong(f"input {index}: {reason} (ATTNSERVE_MAX_WINDOWS_PER_INPUT)")
    return [_pair_windows(tokenizer, q, d, size, overlap) for q, d, size in zip(queries, documents, sizes, strict=True)]


def pair_window(tokenizer: TextTokenizer) -> int:
    """The fewest document tokens a chunked pair's window holds: after a query of the most tokens allowed (half
    the room)."""
    room = tokenizer.max_length - tokenizer.pair_special_count
    return room - room // 2


def check_pair_overlap(tokenizer: TextTokenizer, overlap: int) -> None:
    """OutOfRange unless 0 <= overlap < `pair_window`: the bound a rerank request's overlap is held to whatever
    its query (the served OpenAPI document's)."""
    size = pair_window(tokenizer)
    if not 0 <= overlap < size:
        raise OutOfRange(f"chunk_overlap must be at least 0 and below {size}, the document tokens a chunked pair's "
                         f"window holds after the longest query it takes (half of the max length of "
                         f"{tokenizer.max_length} less the {tokenizer.pair_special_count} special tokens)")


def pair_window_size(tokenizer: TextTokenizer, query_tokens: int, index: int = 0) -> int:
    """Document tokens per window after a query of `query_tokens`; InputTooLong when the query takes more
    than half the room."""
    room = tokenizer.max_length - tokenizer.pair_special_count
    if query_tokens > room // 2:
        raise InputTooLong(f"input {index}: the query has {query_tokens} tokens; a chunked pair holds at most "
                           f"{room // 2} (half of the max length less the special tokens)")
    return room - query_tokens


def _pair_windows(tokenizer: TextTokenizer, query: Encoding, document: Encoding, size: int,
                  overlap: int) -> list[Window]:
    document.truncate(size, stride=overlap)  # in place: the first window; the others in .overflowing
    wrapped = tokenizer.wrap(query, document)  # each document window after the (whole) query
    layout = _type_layout(wrapped)
    return [_pair_window(w, layout) for w in (wrapped, *wrapped.overflowing)]


TypeLayout = tuple[list[int], int, list[int]]  # type ids before the document, of its tokens, after it


def _type_layout(first: Encoding) -> TypeLayout:
    """The pair template's token types around the document, read off the first window: the post-processor
    gives the overflowing windows segment A's type ids throughout, so theirs are rebuilt from this."""
    types, sequences = list(first.type_ids), list(first.sequence_ids)
    content = [i for i, s in enumerate(sequences) if s == 1]
    if not content:
        return types, 0, []
    return types[:content[0]], types[content[0]], types[content[-1] + 1:]


def _pair_window(encoding: Encoding, layout: TypeLayout) -> Window:
    content = [i for i, s in enumerate(encoding.sequence_ids) if s == 1]
    start, stop = (encoding.offsets[content[0]][0], encoding.offsets[content[-1]][1]) if content else (0, 0)
    before, inside, after = layout
    types = np.asarray([*before, *[inside] * len(content), *after], dtype=np.int64) if content else \
        np.asarray(encoding.type_ids, dtype=np.int64)  # (n,)
    one = dataclasses.replace(encoded(encoding), types=types)
    return Window(one.ids, int(start), int(stop), len(content), types, one)


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


def _text_windows(tokenizer: TextTokenizer, encoding: Encoding, size: int, overlap: int, keep_tokens: bool = False,
                  prompt: Encoded | None = None, shift: int = 0) -> list[Window]:
    """A text's windows; with the prompt's tokens (split off `encoding`, of `shift` characters) in each."""
    count = count_windows(len(encoding.ids), size, overlap)
    encoding.truncate(size, stride=overlap)  # in place: the first window; the others in .overflowing
    wrapped = tokenizer.wrap(encoding)
    windows = [wrapped, *wrapped.overflowing]
    if prompt is None:
        return [_text_window(w, keep_tokens) for w in windows]
    kept = windows[:count]  # see split_prompt: the prompt's tokens are left in the overflow
    return [_prompted(_text_window(w, False), prompt, tokenizer.lead, shift) for w in kept]


def _text_window(encoding: Encoding, keep_tokens: bool) -> Window:
    content = [i for i, sequence in enumerate(encoding.sequence_ids) if sequence is not None]
    start, stop = (encoding.offsets[content[0]][0], encoding.offsets[content[-1]][1]) if content else (0, 0)
    kept = encoded(encoding) if keep_tokens else None
    return Window(np.asarray(encoding.ids, dtype=np.int64), int(start), int(stop), len(content), encoded=kept)


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
