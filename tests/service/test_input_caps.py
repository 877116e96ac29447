"""The per-input character caps follow each served model (`RequestLimits.for_model`): a model of 8,192 positions
takes a document of 5,000 tokens and over 20,000 characters whole under the defaults, where the 64-position tiny
model served beside it refuses it (its default stays at the 20,000-character floor); an operator's cap holds for
every model; each refusal is the one JSON error shape naming its setting. The long model is the tiny one with
8,192 learned positions, exported once for this module."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from inference.options import CHARS_PER_TOKEN, MIN_CHUNKED_INPUT_CHARS, MIN_INPUT_CHARS
from tests.helpers.serving import assert_error, serving
from tests.helpers.tiny import make_tiny_checkpoint

pytestmark = pytest.mark.slow  # one export of its own
LONG = 8_192  # positions, as ModernBERT's
WORDS = 5_000


@pytest.fixture(scope="module")
def long_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from export.bundle import export_bundle

    checkpoint = make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "long", max_length=LONG)
    out = tmp_path_factory.mktemp("bundles") / "long"
    export_bundle(checkpoint, out, variants=("fp32",), name="long")
    return out


@pytest.fixture(scope="module")
def document(long_bundle: Path) -> str:
    """5,000 of the tiny vocabulary's whole words (one token each): over 20,000 characters, well within 8,192
    tokens."""
    tokenizer = Tokenizer.from_file(str(long_bundle / "tokenizer.json"))
    words = sorted(w for w in tokenizer.get_vocab() if w.isalpha() and len(w) >= 4)
    rng = random.Random(0)
    text = " ".join(rng.choice(words) for _ in range(WORDS))
    assert len(tokenizer.encode(text, add_special_tokens=False).ids) == WORDS
    assert MIN_INPUT_CHARS < len(text) < LONG * CHARS_PER_TOKEN
    return text


async def test_each_model_gets_the_cap_of_its_max_length(long_bundle, tiny_bundle, document):
    async with serving([f"long={long_bundle}", f"tiny={tiny_bundle}"], intra_op_threads=1) as (_, client):
        whole = await client.post("/embed", json={"inputs": document, "model": "long", "truncate": False})
        assert whole.status_code == 200, whole.text  # every token of it, nothing cut
        refused = await client.post("/embed", json={"inputs": document, "model": "tiny"})
        message = assert_error(refused, 422, "input_too_long")["message"]
        assert message == (f"input 0 has {len(document)} characters, over the limit of {MIN_INPUT_CHARS} (the "
                           "default for a model of 64 tokens; ATTNSERVE_MAX_INPUT_CHARS sets another)")
        cut = await client.post("/embed", json={"inputs": document[:MIN_INPUT_CHARS], "model": "tiny"})
        assert cut.status_code == 200, cut.text  # at the floor: truncated to 64 tokens, as before
        info = (await client.get("/info")).json()
    caps = {m["name"]: (m["max_input_chars"], m["max_chunked_input_chars"]) for m in info["models"]}
    assert caps == {"long": (LONG * CHARS_PER_TOKEN, MIN_CHUNKED_INPUT_CHARS),
                    "tiny": (MIN_INPUT_CHARS, MIN_CHUNKED_INPUT_CHARS)}
    assert info["limits"]["max_input_chars"] == LONG * CHARS_PER_TOKEN  # the default model's


async def test_an_operators_cap_holds_for_every_model(long_bundle, document):
    async with serving(long_bundle, intra_op_threads=1, max_input_chars=MIN_INPUT_CHARS) as (_, client):
        refused = await client.post("/v1/embeddings", json={"input": [document]})
        message = assert_error(refused, 422, "input_too_long")["message"]
        assert message.endswith(f"over the limit of {MIN_INPUT_CHARS} (ATTNSERVE_MAX_INPUT_CHARS)")
        chunked = await client.post("/embed", json={"inputs": document, "chunking": "mean"})
        assert chunked.status_code == 200, chunked.text  # the chunked cap is its own: 100,000
        info = (await client.get("/info")).json()
    assert info["models"][0]["max_input_chars"] == info["limits"]["max_input_chars"] == MIN_INPUT_CHARS


async def test_a_body_over_the_payload_limit_is_still_the_json_413(long_bundle, document):
    async with serving(long_bundle, intra_op_threads=1, payload_limit_bytes=10_000) as (_, client):
        too_big = await client.post("/embed", json={"inputs": document})
        assert "(ATTNSERVE_PAYLOAD_LIMIT_BYTES)" in assert_error(too_big, 413, "payload_too_large")["message"]
