"""The one rule for a served model's character caps (`RequestLimits.for_model`): unset, its max length times
CHARS_PER_TOKEN with a floor, the chunked cap never under the plain one; set, the operator's value for every model;
and the refusal naming where its cap came from."""

from __future__ import annotations

import pytest

from inference.errors import InputTooLong
from inference.limits import check_inputs
from inference.options import CHARS_PER_TOKEN, MIN_CHUNKED_INPUT_CHARS, MIN_INPUT_CHARS, RequestLimits


@pytest.mark.parametrize(("max_length", "plain", "chunked"), [
    (64, MIN_INPUT_CHARS, MIN_CHUNKED_INPUT_CHARS),  # short models keep the floor: longer texts are truncated
    (512, MIN_INPUT_CHARS, MIN_CHUNKED_INPUT_CHARS),
    (8_192, 8_192 * CHARS_PER_TOKEN, MIN_CHUNKED_INPUT_CHARS),  # ModernBERT: 65,536
    (32_768, 32_768 * CHARS_PER_TOKEN, 32_768 * CHARS_PER_TOKEN),  # Qwen3-Embedding: chunked no tighter than plain
])
def test_unset_caps_follow_the_models_max_length(max_length, plain, chunked):
    limits = RequestLimits().for_model(max_length)
    assert (limits.max_input_chars, limits.max_chunked_input_chars) == (plain, chunked)


def test_an_operators_caps_hold_whatever_the_model():
    for max_length in (64, 8_192, 32_768):
        limits = RequestLimits(max_input_chars=500, max_chunked_input_chars=1_000).for_model(max_length)
        assert (limits.max_input_chars, limits.max_chunked_input_chars) == (500, 1_000)
    assert RequestLimits(max_input_chars=500).for_model(8_192).max_chunked_input_chars == MIN_CHUNKED_INPUT_CHARS


def test_the_refusal_says_where_the_cap_came_from():
    text = "x" * (MIN_INPUT_CHARS + 1)
    with pytest.raises(InputTooLong, match=r"over the limit of 20000 \(the default for a model of 512 tokens; "
                                           r"ATTNSERVE_MAX_INPUT_CHARS sets another\)$"):
        check_inputs(RequestLimits().for_model(512), ["ok", text])
    with pytest.raises(InputTooLong, match=r"^input 0 has 20001 characters, over the limit of 100 "
                                           r"\(ATTNSERVE_MAX_INPUT_CHARS\)$"):
        check_inputs(RequestLimits(max_input_chars=100).for_model(512), [text])
    with pytest.raises(TypeError):  # unresolved limits: a caller forgot the model
        check_inputs(RequestLimits(), [text])
