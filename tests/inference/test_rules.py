"""inference.rules, the one owner of a request's overlap and adapter rules, on the tiny bundle (its window of
max_length less [CLS] and [SEP]) and a LoRA bundle: a value not given resolves to the model's default for that
window, a given one is held to it (OutOfRange, 422), and an adapter name maps to the bundle's index or is refused
naming the model's adapters."""

from __future__ import annotations

from pathlib import Path

import pytest

from inference import rules
from inference.chunking import DEFAULT_OVERLAP, Chunking, default_overlap, pair_window, window_size
from inference.errors import OutOfRange, UnknownAdapter
from inference.options import LoadOptions
from inference.prompts import longest_prompt
from inference.runtime.loading import LoadedBundle, load_bundle


@pytest.fixture(scope="module")
def bundle(tiny_bundle: Path) -> LoadedBundle:
    return load_bundle(tiny_bundle, LoadOptions(), kinds=("fast",))


def test_an_overlap_not_given_is_the_default_for_the_window_less_the_longest_prompt(bundle: LoadedBundle) -> None:
    tokenizer, manifest = bundle.tokenizer, bundle.manifest
    window = window_size(tokenizer) - longest_prompt(manifest, tokenizer)
    assert rules.text_overlap(tokenizer, manifest, None) == default_overlap(window)
    assert rules.pair_overlap(tokenizer, None) == default_overlap(pair_window(tokenizer))
    assert rules.token_overlap(tokenizer, None) == default_overlap(window_size(tokenizer))
    assert default_overlap(window) in (DEFAULT_OVERLAP, window // 2)


def test_a_given_overlap_is_kept_inside_the_window_and_refused_past_it(bundle: LoadedBundle) -> None:
    tokenizer, manifest = bundle.tokenizer, bundle.manifest
    window = window_size(tokenizer) - longest_prompt(manifest, tokenizer)
    assert rules.text_overlap(tokenizer, manifest, window - 1) == window - 1
    with pytest.raises(OutOfRange, match="chunk_overlap"):
        rules.text_overlap(tokenizer, manifest, window)
    with pytest.raises(OutOfRange, match="chunk_overlap"):
        rules.pair_overlap(tokenizer, pair_window(tokenizer))
    assert rules.token_overlap(tokenizer, 3) == 3


def test_chunking_is_none_to_truncate_but_a_given_overlap_is_checked_even_then(bundle: LoadedBundle) -> None:
    tokenizer, manifest = bundle.tokenizer, bundle.manifest
    assert rules.text_chunking(tokenizer, manifest, None, None) is None
    assert rules.text_chunking(tokenizer, manifest, None, 1) is None
    with pytest.raises(OutOfRange):
        rules.text_chunking(tokenizer, manifest, None, window_size(tokenizer))
    default = rules.text_overlap(tokenizer, manifest, None)
    assert rules.text_chunking(tokenizer, manifest, "mean", None) == Chunking("mean", default)
    assert rules.text_chunking(tokenizer, manifest, "windows", 2) == Chunking("windows", 2)


def test_an_adapter_name_maps_to_the_bundles_index_or_is_refused(task_bundle: Path, bundle: LoadedBundle) -> None:
    manifest = load_bundle(task_bundle, LoadOptions(), kinds=("fast",)).manifest
    names = [adapter.name for adapter in manifest.adapters]
    assert [rules.adapter_index(manifest, name, "jina") for name in [None, *names]] == list(range(len(names) + 1))
    with pytest.raises(UnknownAdapter, match=r"task 'nope' is not one of model jina's tasks \(it has: ") as error:
        rules.adapter_index(manifest, "nope", "jina")
    assert error.value.code == "unknown_task"
    with pytest.raises(UnknownAdapter, match="model plain has no tasks") as error:
        rules.adapter_index(bundle.manifest, names[0], "plain")
    assert error.value.code == "no_tasks"
