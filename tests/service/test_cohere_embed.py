"""Cohere's POST /v2/embed on a sentence-transformers model with query and document prompts (tests/helpers/exports.py
"mpnet-sentence": MPNet, weighted-mean pooling, a tanh Dense, Normalize, 20 tokens), against sentence-transformers:
`encode` with the prompt each input_type names gives the floats; `quantize_embeddings` with calibration embeddings
gives the int8, uint8, binary and ubinary codes, from the served floats exactly, and from the reference's own floats
to within one step where the two floats straddle a step's edge. The Cohere SDK reads the answer; what the server
does not do is refused by name.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio

from inference.quantize import CALIBRATION_TEXTS
from tests.helpers.exports import Exported
from tests.helpers.sentence import load_reference
from tests.helpers.serving import assert_error, post_ok, serving, uvicorn_here, worst
from tests.helpers.tokenizers import MULTILINGUAL

pytestmark = pytest.mark.asyncio(loop_scope="module")
TOLERANCE = 1e-5
CASE = "mpnet-sentence"
TEXTS = MULTILINGUAL[:6]
LONG = " ".join(["the plot makes no sense at all"] * 8)  # past the model's 20 tokens
QUANTISED = ("int8", "uint8", "binary", "ubinary")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def client(family_export: Callable[[str], Exported]) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(family_export(CASE).bundle, intra_op_threads=1) as (_, served):
        yield served


@pytest.fixture(scope="module")
def reference(family_export: Callable[[str], Exported]) -> Any:
    return load_reference(family_export(CASE).source)


async def embed(client: httpx.AsyncClient, texts: list[str], **fields: Any) -> dict[str, Any]:
    return (await post_ok(client, "/v2/embed", {"texts": texts, **fields}))  # type: ignore[no-any-return]


async def test_input_types_give_sentence_transformers_floats_and_base64_the_same_bits(client, reference) -> None:
    for input_type, prompt in (("search_query", "query"), ("search_document", "document")):
        answer = await embed(client, TEXTS, input_type=input_type, embedding_types=["float", "base64"])
        assert worst(answer["embeddings"]["float"], reference.encode(TEXTS, prompt_name=prompt)) <= TOLERANCE
        decoded = [np.frombuffer(base64.b64decode(row), dtype="<f4") for row in answer["embeddings"]["base64"]]
        assert np.array_equal(np.stack(decoded), np.asarray(answer["embeddings"]["float"], dtype=np.float32))
        assert answer["texts"] == TEXTS and answer["response_type"] == "embeddings_by_type"
        assert answer["meta"]["billed_units"]["input_tokens"] > 0
    plain = await embed(client, TEXTS, input_type="clustering")  # no such prompt: the text as given
    assert worst(plain["embeddings"]["float"], reference.encode(TEXTS, prompt_name=None, prompt="")) <= TOLERANCE


async def test_quantised_types_are_sentence_transformers_codes_with_the_calibration_ranges(client, reference) -> None:
    from sentence_transformers.util.quantization import quantize_embeddings

    answer = await embed(client, TEXTS, input_type="search_query", embedding_types=["float", *QUANTISED])
    served = np.asarray(answer["embeddings"]["float"], dtype=np.float32)
    calibration = np.asarray((await embed(client, list(CALIBRATION_TEXTS), input_type="search_document"))
                             ["embeddings"]["float"], dtype=np.float32)
    own = reference.encode(TEXTS, prompt_name="query")
    own_calibration = reference.encode(list(CALIBRATION_TEXTS), prompt_name="document")
    for precision in QUANTISED:
        got = np.asarray(answer["embeddings"][precision])
        expected = quantize_embeddings(served, precision, calibration_embeddings=calibration)
        assert np.array_equal(got, expected), precision  # the served floats, exactly as sentence-transformers
        near = quantize_embeddings(own, precision, calibration_embeddings=own_calibration).astype(np.int16)
        if precision.endswith("int8"):
            assert np.abs(got - near).max() <= 1, precision  # the reference's floats: a step at most
        else:
            assert np.array_equal(got, near), precision
    assert len(answer["embeddings"]["ubinary"][0]) == -(-served.shape[1] // 8)  # eight dimensions a byte


async def test_a_texts_codes_do_not_depend_on_the_other_texts(client) -> None:
    together = await embed(client, TEXTS, embedding_types=["int8", "uint8"])
    for i in (0, 3):
        alone = await embed(client, [TEXTS[i]], embedding_types=["int8", "uint8"])
        for precision in ("int8", "uint8"):
            assert alone["embeddings"][precision][0] == together["embeddings"][precision][i]


async def test_output_dimension_and_truncate(client, reference) -> None:
    cut = await embed(client, TEXTS, input_type="search_query", output_dimension=8, embedding_types=["float", "int8"])
    full = reference.encode(TEXTS, prompt_name="query")[:, :8]
    assert worst(cut["embeddings"]["float"], full / np.linalg.norm(full, axis=1, keepdims=True)) <= TOLERANCE
    assert len(cut["embeddings"]["int8"][0]) == 8
    end, start = [await embed(client, [LONG], truncate=t) for t in ("END", "START")]
    right = await post_ok(client, "/embed", {"inputs": [LONG], "truncate": True})
    left = await post_ok(client, "/embed", {"inputs": [LONG], "truncate": True, "truncation_direction": "Left"})
    assert worst(end["embeddings"]["float"], np.asarray(right, dtype=np.float32)) == 0.0
    assert worst(start["embeddings"]["float"], np.asarray(left, dtype=np.float32)) == 0.0
    refused = await client.post("/v2/embed", json={"texts": [LONG], "truncate": "NONE"})
    assert_error(refused, 422, "input_too_long")


@pytest.mark.parametrize(("field", "value"), [("max_tokens", 8), ("priority", 1)])
async def test_what_is_not_served_is_refused_by_name(client, field, value) -> None:
    body = {"texts": ["x"], field: value}
    error = assert_error(await client.post("/v2/embed", json=body), 422, "validation_error")
    assert field in error["message"] and "not supported" in error["message"]
    assert (await client.post("/v2/embed", json={"texts": ["x"], field: None})).status_code == 200  # null: absent


async def test_inputs_of_text_parts_are_texts(client) -> None:
    """`inputs` of one text part each answer what `texts` answers (input_type and truncate apply); an input of two
    parts (Cohere's fused embedding), or inputs beside texts, are refused."""
    texts = ["a first text", "the second, longer text"]
    asked = {"input_type": "search_query", "embedding_types": ["float", "int8"]}
    plain = await post_ok(client, "/v2/embed", {"texts": texts, **asked})
    parts = await post_ok(client, "/v2/embed", {"inputs": [{"content": [{"type": "text", "text": t}]} for t in texts],
                                                **asked})
    assert parts["embeddings"] == plain["embeddings"] and parts["texts"] is None
    two = [{"content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}]
    assert_error(await client.post("/v2/embed", json={"inputs": two}), 422, "validation_error")
    both = {"texts": ["x"], "inputs": [{"content": [{"type": "text", "text": "x"}]}]}
    assert "one of them" in assert_error(await client.post("/v2/embed", json=both), 422)["message"]


async def test_images_and_input_type_image_are_for_an_image_model(client) -> None:
    """A text model is sent texts: images are refused by what the model reads, input_type image with texts and
    texts with images by the request's shape (tests/service/test_image_embeddings.py: an image model's)."""
    png = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
    images = assert_error(await client.post("/v2/embed", json={"images": [png]}), 422, "unsupported")
    assert "reads texts, not images" in images["message"]
    for body in ({"texts": ["x"], "input_type": "image"}, {"texts": ["x"], "images": [png]}):
        assert_error(await client.post("/v2/embed", json=body), 422, "validation_error")


async def test_unknown_fields_and_types_and_no_texts_are_refused(client) -> None:
    unknown = assert_error(await client.post("/v2/embed", json={"texts": ["x"], "colour": 1}), 422)
    assert "colour" in unknown["message"]
    kind = assert_error(await client.post("/v2/embed", json={"texts": ["x"], "embedding_types": ["int4"]}), 422)
    assert "embedding_types" in kind["message"]
    assert "`texts`, `images` or `inputs`" in assert_error(await client.post("/v2/embed", json={}), 422)["message"]


async def test_the_cohere_sdk_reads_the_answer(family_export, client) -> None:
    cohere = pytest.importorskip("cohere")
    http = await embed(client, TEXTS[:3], input_type="search_document", embedding_types=["float", "int8", "ubinary"])
    async with uvicorn_here(family_export(CASE).bundle) as (_, url):
        sdk = cohere.AsyncClientV2(api_key="unused", base_url=url)
        answer = await sdk.embed(model="any", texts=TEXTS[:3], input_type="search_document",
                                 embedding_types=["float", "int8", "ubinary"])
    assert worst(answer.embeddings.float_, np.asarray(http["embeddings"]["float"], dtype=np.float32)) == 0.0
    assert answer.embeddings.int8 == http["embeddings"]["int8"]
    assert answer.embeddings.ubinary == http["embeddings"]["ubinary"]


async def test_the_document_states_the_types(client) -> None:
    document = (await client.get("/openapi.json")).json()
    operation = document["paths"]["/v2/embed"]["post"]
    assert operation["summary"] == "Embeddings, Cohere (v2) style"
    schema = document["components"]["schemas"]["CohereEmbedRequest"]["properties"]
    assert set(schema["embedding_types"]["items"]["enum"]) == {"float", "int8", "uint8", "binary", "ubinary",
                                                              "base64"}
    for refused in ("images", "max_tokens", "priority"):  # what the server refuses, the schema does not allow
        assert schema[refused]["type"] == "null", schema[refused]
    assert "image" not in str(schema["input_type"]["anyOf"])
    request = document["components"]["schemas"]["CohereEmbedRequest"]
    assert "required" not in request and [branch["required"] for branch in request["oneOf"]] == [["texts"], ["inputs"]]
    parts = document["components"]["schemas"]["CohereInput"]["properties"]["content"]["items"]
    assert [branch["$ref"] for branch in parts["oneOf"]] == ["#/components/schemas/CohereText"]  # no image parts
    assert schema["output_dimension"]["anyOf"][0]["maximum"] == 16  # the served model's width
