"""The exact answers cache: what a graph returned for one input, by the model's fingerprint, the batch kind
and the input's exact token ids, bounded in bytes, least recently used out first.

Exact because every part of what a graph computes from an input is in the key: the model's fingerprint
(`LoadedBundle.fingerprint`: sha256 over the served fast graph, the tokenizer and the pooling, as the manifest
records them), the batch kind asked for (pooled outputs, or per-token vectors), the LoRA adapter the input
runs with (its index among the graph's adapters; 0 the base), and the token ids themselves (so a prompt, the
truncation side and a chunk's window are in it). The served variants are batch-invariant, so an input's answer
does not depend on its batch partners; and a hit returns the very arrays the graph returned when the entry was
made (copied out of the batch's outputs, read-only): bit for bit what the graph answered. Two bundles of one
model share entries; bundles of other models never meet.

Keys are sha256 digests (32 bytes) of fingerprint, batch kind and sequence (`key`), not the ids themselves: an
entry's size is its arrays' bytes plus a fixed allowance, and `max_bytes` bounds their sum.

The same cache keeps a text's token ids (`text_key`: by the fingerprint, which covers the tokenizer, the max
length, the truncation flag and side, the prompt and the text), so a request of texts seen before is not
tokenised again: tokenising a 128-token text took about half of a fully cached request's time on the server.
The tokenizer is deterministic, so those ids are the ones tokenising would give; the answer is still looked
up by them.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import fields

import numpy as np

from inference.runtime.graphs import FAST, TOKENS, BatchKind, Input, Outputs

CACHED_KINDS = frozenset({FAST, TOKENS})  # attention maps are large (L x H x n x n) and would flush the vectors
IDS = "ids"  # a text entry's one array: its (T,) token ids, kept as int32 (every vocabulary served fits)
ENTRY_BYTES = 256  # allowance for an entry's key, dict slots and array headers, on top of its arrays' bytes


def key(model_fingerprint: str, kind: BatchKind, sequence: Input, adapter: int = 0) -> bytes:
    """The digest of one input's entry: its arrays (ids, and type ids or attended flags when it has them; an image's
    pixel values, which its decoded pixels and the bundle's steps decide) are named in the header, so ids alone, ids
    and type ids, ids and attended flags, and images never share a key."""
    given = {f.name: value for f in fields(sequence) if (value := getattr(sequence, f.name)) is not None}
    digest = hashlib.sha256(f"{model_fingerprint}/{kind}/{adapter}/{len(sequence)}/{','.join(given)}/".encode())
    for value in given.values():  # (T,) ids, or (C, H, W) float32 pixels
        is_float = isinstance(value, np.ndarray) and value.dtype.kind == "f"
        digest.update(np.ascontiguousarray(value, dtype=np.float32 if is_float else np.int64).tobytes())
    return digest.digest()


def text_key(model_fingerprint: str, max_length: int, text: str, truncate: bool, direction: str, prompt: str) -> bytes:
    digest = hashlib.sha256(f"{model_fingerprint}/text/{max_length}/{truncate}/{direction}/{len(prompt)}/".encode())
    digest.update(f"{prompt}{text}".encode("utf-8", "surrogatepass"))  # JSON may carry lone surrogates
    return digest.digest()


def size_of(outputs: Outputs) -> int:
    return ENTRY_BYTES + sum(value.nbytes for value in outputs.values())


def frozen(outputs: Outputs) -> Outputs:
    """Copies of one input's outputs, detached from the batch's arrays and read-only."""
    copies = {}
    for name, value in outputs.items():
        copy = np.array(value, copy=True)
        copy.flags.writeable = False
        copies[name] = copy
    return copies


class AnswerCache:
    """Least recently used entries out first, while the entries' bytes pass `max_bytes` (0: nothing kept)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[bytes, Outputs] = OrderedDict()
        self.bytes = self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, entry_key: bytes) -> Outputs | None:
        found = self._entries.get(entry_key)
        if found is not None:
            self._entries.move_to_end(entry_key)
        return found

    def put(self, entry_key: bytes, outputs: Outputs) -> None:
        """Keep `outputs` (already frozen) under `entry_key`, evicting the least recently used as needed; an
        entry larger than the whole cache is not kept."""
        size = size_of(outputs)
        if size > self.max_bytes or entry_key in self._entries:
            return
        self._entries[entry_key] = outputs
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.bytes -= size_of(evicted)
            self.evictions += 1

    def put_all(self, keys: Sequence[bytes], outputs: Sequence[Outputs]) -> None:
        for entry_key, value in zip(keys, outputs, strict=True):
            self.put(entry_key, value)
