"""Prompts in the core: which prefix a request gets (`inference.prompts`), and how a prompted text is tokenised
and cut (`inference.runtime.tokenize`, `inference.chunking`) by each kind of tokenizer real checkpoints ship. Cut from
the
right, a prompted text is the prompt and text tokenised as one string (sentence-transformers' encoding); cut from
the left, and in every window of a chunked text, the prompt's tokens are kept at the start."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer

from bundle.manifest import Manifest
from inference.chunking import cut
from inference.errors import OutOfRange, UnknownPrompt
from inference.prompts import prompt_text
from inference.runtime.tokenize import TextTokenizer
from tests.helpers import tokenizers

PROMPT = "query: "
TEXT = " ".join(tokenizers.MULTILINGUAL[:3])
KINDS = {"wordpiece": tokenizers.wordpiece, "byte-level BPE": tokenizers.byte_level_bpe,
         "unigram": tokenizers.unigram, "modernbert BPE": tokenizers.modernbert_bpe}


def manifest(prompts: dict[str, str], default: str | None = None) -> Manifest:
    fields = dict(name="m", version="1", created_at="", source={"path": "", "kind": "", "sha256": ""},
                  model_config={}, pooling="mean", normalize=True, max_length=16, pad_id=0, hidden_size=8, num_layers=1,
                  num_heads=1, tokenizer_sha256="", graphs=[], prompts=prompts, default_prompt_name=default)
    return Manifest.model_validate(fields)


def test_a_request_gets_its_named_prompt_its_input_types_or_the_default() -> None:
    e5 = manifest({"query": "query: ", "passage": "passage: "}, default="query")
    assert prompt_text(e5) == "query: "
    assert prompt_text(e5, "passage") == "passage: "
    assert prompt_text(e5, input_type="document") == "passage: "  # document, else passage
    bge = manifest({"query": "Represent this sentence: "})  # queries only, no default
    assert (prompt_text(bge), prompt_text(bge, input_type="query"), prompt_text(bge, input_type="document")) == (
        "", "Represent this sentence: ", "")
    with pytest.raises(UnknownPrompt, match="'doc' is not one of this model's prompts \\(it has: 'passage', 'query'"):
        prompt_text(e5, "doc")
    with pytest.raises(UnknownPrompt, match="it has: none"):
        prompt_text(manifest({}), "query")


@pytest.fixture(params=list(KINDS), scope="module")
def tokenizer(request: pytest.FixtureRequest) -> Tokenizer:
    return KINDS[request.param]()


def test_cut_from_the_right_a_prompted_text_is_one_string(tokenizer: Tokenizer) -> None:
    """sentence-transformers prepends the prompt and tokenises the whole, cut at max_seq_length."""
    ours = TextTokenizer(tokenizer, 16).encode([TEXT], truncate=True, prompt=PROMPT)[0]
    expected = Tokenizer.from_str(tokenizer.to_str())
    expected.enable_truncation(16)
    assert ours.ids.tolist() == expected.encode(PROMPT + TEXT).ids


def test_cut_from_the_left_a_prompted_text_keeps_its_prompt(tokenizer: Tokenizer) -> None:
    text_tokenizer = TextTokenizer(tokenizer, 16)
    whole = tokenizer.encode(PROMPT + TEXT)  # special tokens included, nothing cut
    ours = text_tokenizer.encode([TEXT], truncate=True, direction="left", prompt=PROMPT)[0]
    lead, trail = text_tokenizer.lead, text_tokenizer.special_count - text_tokenizer.lead
    prompt_tokens = _prompt_tokens(tokenizer)
    kept = 16 - text_tokenizer.special_count - prompt_tokens
    assert ours.length == 16
    assert ours.ids.tolist() == [*whole.ids[:lead + prompt_tokens], *whole.ids[-trail - kept:]]
    assert ours.special == [*([True] * lead), *([False] * (16 - lead - trail)), *([True] * trail)]


def test_every_window_of_a_prompted_text_starts_with_the_prompt(tokenizer: Tokenizer) -> None:
    text_tokenizer = TextTokenizer(tokenizer, 16)
    lead, prompt_tokens = text_tokenizer.lead, _prompt_tokens(tokenizer)
    (windows,) = cut(text_tokenizer, [TEXT], 2, 100, prompt=PROMPT)
    content = tokenizer.encode(PROMPT + TEXT, add_special_tokens=False)
    text_ids, prompt_ids = content.ids[prompt_tokens:], content.ids[:prompt_tokens]
    size = 16 - text_tokenizer.special_count - prompt_tokens
    assert len(windows) == 1 + -(-(len(text_ids) - size) // (size - 2)) > 1
    for k, window in enumerate(windows):
        ids = window.ids.tolist()
        assert ids[lead:lead + prompt_tokens] == prompt_ids
        assert ids[lead + prompt_tokens:len(ids) - (text_tokenizer.special_count - lead)] == \
            text_ids[k * (size - 2):k * (size - 2) + size]
        assert window.tokens == min(size, len(text_ids) - k * (size - 2))  # the text's tokens: the mean's weights
    assert windows[0].start == 0 and windows[-1].stop == len(TEXT)  # spans in the text's own characters


def test_a_prompted_text_of_one_window_is_its_prompted_encoding(tokenizer: Tokenizer) -> None:
    text_tokenizer = TextTokenizer(tokenizer, 64)
    short = tokenizers.MULTILINGUAL[0][:20]
    (windows,) = cut(text_tokenizer, [short], 2, 100, prompt=PROMPT)
    assert len(windows) == 1
    assert np.array_equal(windows[0].ids, text_tokenizer.encode([short], truncate=True, prompt=PROMPT)[0].ids)


def test_an_overlap_the_prompt_leaves_no_room_for_is_refused() -> None:
    text_tokenizer = TextTokenizer(tokenizers.wordpiece(), 16)
    size = 16 - 2 - _prompt_tokens(tokenizers.wordpiece())
    with pytest.raises(OutOfRange, match=f"below the window of {size} tokens: .* and the prompt's"):
        cut(text_tokenizer, [TEXT], size, 100, prompt=PROMPT)


def _prompt_tokens(tokenizer: Tokenizer) -> int:
    """Tokens of PROMPT + TEXT that end within the prompt (TEXT starts a new word in every test tokenizer)."""
    offsets = tokenizer.encode(PROMPT + TEXT, add_special_tokens=False).offsets
    return sum(1 for _, stop in offsets if stop <= len(PROMPT))
