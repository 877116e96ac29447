"""The /v2 inference body's schema says what the server accepts: schemathesis with every check found
schema-valid inputs the server refused (422), an input whose `data` is null or absent with no
`binary_data_size`, and a negative `shape` dimension. Each case here is judged twice, by JSON Schema
validation against the served OpenAPI document and by the server, and the two must agree; schemathesis'
own generator, given the document, must not produce either case.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from service.app import create_app
from service.settings import Settings
from tests.helpers.serving import serving

INFER = "/v2/models/{name}/infer"
BINARY = b"\x05\0\0\0a cat"  # one BYTES element, as the binary tensor data extension frames it


def text(**fields: Any) -> dict[str, Any]:
    return {"name": "text", "datatype": "BYTES", "shape": [1], **fields}


REFUSED: dict[str, tuple[dict[str, Any], str]] = {  # name: (input, words in the server's message)
    "data_null": ({"name": "text", "datatype": "BYTES", "shape": [], "data": None}, "neither data nor"),
    "data_absent": (text(), "neither data nor"),
    "size_null": (text(data=None, parameters={"binary_data_size": None}), "neither data nor"),
    "no_size": (text(parameters={}), "neither data nor"),
    "negative_dimension": (text(shape=[-1], data=["a cat"]), ">= 0"),
    "negative_row_length": ({"name": "input_ids", "datatype": "INT64", "shape": [1, -3], "data": [[2, 7, 3]]},
                            ">= 0"),
    "dimension_past_cap": ({"name": "input_ids", "datatype": "INT64", "shape": [0, 2**31], "data": []},
                           "each dimension 0 to 2147483647"),
    "three_dimensions": (text(shape=[1, 1, 1], data=["a cat"]), "3 dimensions; at most 2"),
}
ACCEPTED: dict[str, tuple[dict[str, Any], bytes]] = {  # name: (input, binary data after the JSON header)
    "json": (text(data=["a cat"]), b""),
    "binary": (text(parameters={"binary_data_size": len(BINARY)}), BINARY),
    "binary_data_null": (text(data=None, parameters={"binary_data_size": len(BINARY)}), BINARY),
    "integral_dimension": (text(shape=[1.0], data=["a cat"]), b""),  # JSON Schema's integer 1
    "token_ids": ({"name": "input_ids", "datatype": "INT64", "shape": [1, 3], "data": [[2, 7, 3]]}, b""),
}


def body_schema(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["paths"][INFER]["post"]["requestBody"]["content"]["application/json"]["schema"]


def schema_accepts(doc: dict[str, Any], body: dict[str, Any]) -> bool:
    """JSON Schema 2020-12 (OpenAPI 3.1's dialect) validation of `body` against the inference body's schema."""
    return jsonschema.Draft202012Validator(body_schema(doc)).is_valid(body)


async def post(client: Any, tensor: dict[str, Any], tail: bytes = b"") -> Any:
    header = orjson.dumps({"inputs": [tensor]})
    headers = {"Inference-Header-Content-Length": str(len(header))} if tail else {}
    return await client.post("/v2/models/tiny/infer", content=header + tail, headers=headers)


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_the_schema_refuses_what_the_server_refuses(tiny_bundle: Path, case: str) -> None:
    tensor, words = REFUSED[case]
    async with serving(tiny_bundle, intra_op_threads=1) as (app, client):
        assert not schema_accepts(app.openapi(), {"inputs": [tensor]}), "the document accepts it"
        response = await post(client, tensor)
    assert response.status_code == 422, response.text
    assert set(response.json()) == {"error"} and words in response.json()["error"]


@pytest.mark.parametrize("case", sorted(ACCEPTED))
async def test_the_schema_accepts_what_the_server_accepts(tiny_bundle: Path, case: str) -> None:
    tensor, tail = ACCEPTED[case]
    async with serving(tiny_bundle, intra_op_threads=1) as (app, client):
        assert schema_accepts(app.openapi(), {"inputs": [tensor]}), "the document refuses it"
        response = await post(client, tensor, tail)
    assert response.status_code == 200, response.text


def test_metadata_shapes_keep_minus_one_for_a_dimension_that_varies() -> None:
    """Only a request's dimensions are >= 0: model metadata answers -1 for a dynamic one."""
    doc = create_app(Settings(bundle=Path("unused"))).openapi()
    shape = doc["components"]["schemas"]["MetadataTensor"]["properties"]["shape"]
    assert "minimum" not in shape["items"]


ROUTES_DOC = create_app(Settings(bundle=Path("unused"))).openapi()  # the routes' document: no bundle needed
GENERATED = schemathesis.openapi.from_dict(ROUTES_DOC)[INFER]["POST"].as_strategy()


@given(case=GENERATED)
@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_schemathesis_generates_only_inputs_with_data_or_binary_size(case: Any) -> None:
    for tensor in case.body["inputs"]:
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        assert tensor.get("data") is not None or size is not None, tensor
        assert len(tensor["shape"]) <= 2 and all(0 <= d < 2**31 for d in tensor["shape"]), tensor
