"""A request's rules, resolved once from what the request gave (None: the model's default), so that every route
and the corpus job apply the same rule the same way. Routes translate JSON into these arguments; jobs call them
with their flags' values. The rules:

    text_overlap      tokens shared by neighbouring windows of a text: the one given, held to the window less the
                      model's longest prompt (one bound for every request, whichever prompt it names: the served
                      OpenAPI document's); else the default for that window (`chunking.default_overlap`)
    text_chunking     a request's chunking: None to truncate; an overlap it gives is checked even when it does not
                      chunk, as the OpenAPI document bounds the field on every request
    pair_overlap      the same for (query, document) windows: held to the pair window, whose room is the
                      document's (the query repeated in every window takes its share at cut time)
    token_overlap     the same for a token classifier's windows, which carry no prompt
    adapter_index     the LoRA adapter a request (`task` on the wire) or a job (--task) names: 0 for the bare
                      base, i + 1 for the manifest's adapters[i]; a name the model does not have is refused

The prompt is `inference.prompts.prompt_text`'s rule, the windows' cut `inference.chunking`'s.
"""

from __future__ import annotations

from bundle.manifest import Manifest
from inference.chunking import (
    Chunking,
    Mode,
    check_overlap,
    check_pair_overlap,
    default_overlap,
    pair_window,
    window_size,
)
from inference.errors import UnknownAdapter
from inference.prompts import longest_prompt
from inference.runtime.tokenize import TextTokenizer


def text_overlap(tokenizer: TextTokenizer, manifest: Manifest, overlap: int | None) -> int:
    """The overlap of a text's windows: `overlap` checked against the window less the longest prompt, or, when
    None, the default for that window."""
    prompt = longest_prompt(manifest, tokenizer)
    if overlap is None:
        return default_overlap(window_size(tokenizer) - prompt)
    check_overlap(tokenizer, overlap, prompt=prompt)
    return overlap


def text_chunking(tokenizer: TextTokenizer, manifest: Manifest, mode: Mode | None,
                  overlap: int | None) -> Chunking | None:
    """The request's chunking, or None to truncate (a given overlap is checked either way)."""
    if mode is None and overlap is None:
        return None
    resolved = text_overlap(tokenizer, manifest, overlap)
    return Chunking(mode, resolved) if mode is not None else None


def pair_overlap(tokenizer: TextTokenizer, overlap: int | None) -> int:
    """The overlap of a (query, document) pair's windows: `overlap` checked, or the pair window's default."""
    if overlap is None:
        return default_overlap(pair_window(tokenizer))
    check_pair_overlap(tokenizer, overlap)
    return overlap


def token_overlap(tokenizer: TextTokenizer, overlap: int | None) -> int:
    """The overlap of a token classifier's windows (no prompt): `overlap`, or the text window's default."""
    return default_overlap(window_size(tokenizer)) if overlap is None else overlap


def adapter_index(manifest: Manifest, name: str | None, model: str) -> int:
    """The index a graph run feeds as `adapter` for the adapter `name` (None: 0, the bare base) of the model served
    as `model`; UnknownAdapter (422) for a name the model does not have (naming those it has), or any name when it has
    none."""
    if name is None:
        return 0
    names = [adapter.name for adapter in manifest.adapters]
    if not names:
        raise UnknownAdapter(f"model {model} has no tasks (its bundle has no adapters); leave `task` out",
                             code="no_tasks")
    if name not in names:
        raise UnknownAdapter(f"task {name[:64]!r} is not one of model {model}'s tasks (it has: "
                             f"{', '.join(repr(n) for n in names)})")
    return manifest.adapter_index(name)
