"""The Open Inference Protocol's wire format: the JSON header, tensor data in JSON or as binary data after
it (the binary tensor data extension), and back. Plain numpy; no HTTP framework.

Binary data is little-endian and row-major; a BYTES element is a 4-byte little-endian unsigned length and
then its bytes. A body with binary data starts with the JSON header whose length the
`Inference-Header-Content-Length` header gives; the inputs' data follow in the order of the inputs that
carry `binary_data_size`, and the same holds for the outputs of a response.

An input's shape is checked before any reshape: at most `MAX_RANK` dimensions, each at most `MAX_DIMENSION`
(service.oip.schemas), and their product the number of elements given. So numpy never meets a shape it
cannot hold, as [0, 10**20] is (0 elements, yet past numpy's largest dimension).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from pydantic import ValidationError

from inference.errors import InvalidRequest
from service.errors import UnsupportedMediaType, describe_validation
from service.oip.schemas import MAX_DIMENSION, MAX_RANK, InferInput, InferRequest

# The numeric inputs this server reads (token ids and masks); InferInput.datatype admits these and BYTES.
NUMERIC: dict[str, np.dtype[Any]] = {"INT32": np.dtype("<i4"), "INT64": np.dtype("<i8")}
_LENGTH = struct.Struct("<I")


@dataclass(frozen=True)
class Tensor:
    """One output tensor of a response."""

    name: str
    datatype: str  # "FP32" or "INT64"
    values: np.ndarray
    binary: bool


def header_length(value: str | None) -> int | None:
    """The Inference-Header-Content-Length header as a byte count (None when absent)."""
    if value is None:
        return None
    if not value.strip().isascii() or not value.strip().isdigit():
        raise InvalidRequest(f"Inference-Header-Content-Length must be a whole number of bytes, got {value[:32]!r}")
    return int(value)


def parse_request(body: bytes, header_length: int | None, content_encoding: str | None) -> tuple[InferRequest, bytes]:
    """The validated JSON header and the binary data after it."""
    if content_encoding not in (None, "", "identity"):
        raise UnsupportedMediaType(f"Content-Encoding {content_encoding!r} is not supported; send the body as is")
    if header_length is None:
        header, tail = body, b""
    elif not 0 < header_length <= len(body):
        raise InvalidRequest(f"Inference-Header-Content-Length is {header_length} for a body of {len(body)} bytes "
                             "(a JSON header is required; raw binary requests are not supported)")
    else:
        header, tail = body[:header_length], body[header_length:]
    try:
        return InferRequest.model_validate_json(header), tail
    except ValidationError as error:
        raise InvalidRequest("invalid inference request: " + describe_validation(error.errors()),
                             code="validation_error") from None


def read_inputs(request: InferRequest, tail: bytes) -> dict[str, np.ndarray]:
    """Each input by name, as a numpy array of its shape (of `str` objects for BYTES, decoded as UTF-8)."""
    tensors: dict[str, np.ndarray] = {}
    offset = 0
    for tensor in request.inputs:
        if tensor.name in tensors:
            raise InvalidRequest(f"input {tensor.name!r} is given twice")
        _check_shape(tensor)
        size = tensor.parameters.binary_data_size if tensor.parameters is not None else None
        if size is not None:
            if offset + size > len(tail):
                raise InvalidRequest(f"input {tensor.name!r}: binary_data_size {size} runs past the body's end")
            tensors[tensor.name] = _from_binary(tensor, tail[offset:offset + size])
            offset += size
        else:
            tensors[tensor.name] = _from_json(tensor)
    if offset != len(tail):
        raise InvalidRequest(f"the body has {len(tail) - offset} bytes after the inputs' binary data")
    return tensors


def write_response(header: dict[str, Any], outputs: list[Tensor]) -> tuple[bytes, int | None]:
    """The response body and, when some output is binary, the JSON header's length."""
    tensors: list[dict[str, Any]] = []
    chunks: list[bytes | memoryview] = []
    for out in outputs:
        tensor: dict[str, Any] = {"name": out.name, "datatype": out.datatype, "shape": list(out.values.shape)}
        little = np.ascontiguousarray(out.values, dtype=out.values.dtype.newbyteorder("<"))
        if out.binary:
            chunks.append(little.reshape(-1).view(np.uint8).data)
            tensor["parameters"] = {"binary_data_size": little.nbytes}
        else:
            tensor["data"] = little.reshape(-1)
        tensors.append(tensor)
    json = orjson.dumps({**header, "outputs": tensors}, option=orjson.OPT_SERIALIZE_NUMPY)
    if not chunks:
        return json, None
    return b"".join([json, *chunks]), len(json)


# -- inputs ----------------------------------------------------------------------------------------
def _from_json(tensor: InferInput) -> np.ndarray:
    if tensor.data is None:
        raise InvalidRequest(f"input {tensor.name!r} has neither data nor binary_data_size")
    flat = _flatten(tensor.data)
    _check_count(tensor, len(flat))
    if tensor.datatype == "BYTES":
        if not all(isinstance(v, str) for v in flat):
            raise InvalidRequest(f"input {tensor.name!r}: BYTES data given as JSON must be strings")
        return _texts(tensor, flat)
    dtype = NUMERIC[tensor.datatype]
    if not all(type(v) is int for v in flat):
        raise InvalidRequest(f"input {tensor.name!r}: {tensor.datatype} data must be integers")
    try:
        return np.array(flat, dtype=dtype).reshape(tensor.shape)
    except OverflowError:
        raise InvalidRequest(f"input {tensor.name!r}: a value is out of {tensor.datatype}'s range") from None


def _from_binary(tensor: InferInput, raw: bytes) -> np.ndarray:
    if tensor.datatype == "BYTES":
        elements = _split_bytes(tensor.name, raw)
        _check_count(tensor, len(elements))
        try:
            texts = [element.decode("utf-8") for element in elements]
        except UnicodeDecodeError:
            raise InvalidRequest(f"input {tensor.name!r}: an element is not UTF-8 text") from None
        return _texts(tensor, texts)
    dtype = NUMERIC[tensor.datatype]
    if len(raw) != math.prod(tensor.shape) * dtype.itemsize:
        raise InvalidRequest(f"input {tensor.name!r}: {len(raw)} bytes of binary data for shape {tensor.shape} "
                             f"of {tensor.datatype} ({dtype.itemsize} bytes each)")
    return np.frombuffer(raw, dtype=dtype).reshape(tensor.shape)


def _split_bytes(name: str, raw: bytes) -> list[bytes]:
    """BYTES binary data: each element's 4-byte little-endian length, then the element."""
    elements, offset = [], 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise InvalidRequest(f"input {name!r}: BYTES data ends inside an element's length")
        (length,) = _LENGTH.unpack_from(raw, offset)
        offset += 4
        if offset + length > len(raw):
            raise InvalidRequest(f"input {name!r}: a BYTES element's length runs past its data")
        elements.append(raw[offset:offset + length])
        offset += length
    return elements


def _texts(tensor: InferInput, texts: list[str]) -> np.ndarray:
    """Texts as an object array of the tensor's shape. They are valid Unicode: the JSON parser refuses lone
    surrogate escapes, and strict UTF-8 decoding refuses encoded surrogates."""
    array = np.empty(len(texts), dtype=object)
    array[:] = texts
    return array.reshape(tensor.shape)


def _check_shape(tensor: InferInput) -> None:
    """Refuse a shape no input takes, before numpy is asked to reshape to it."""
    if len(tensor.shape) > MAX_RANK:
        raise InvalidRequest(f"input {tensor.name!r}: shape has {len(tensor.shape)} dimensions; at most "
                             f"{MAX_RANK} are accepted")
    if any(d > MAX_DIMENSION for d in tensor.shape):
        raise InvalidRequest(f"input {tensor.name!r}: shape {tensor.shape} is out of range; each dimension 0 to "
                             f"{MAX_DIMENSION} is accepted")


def _check_count(tensor: InferInput, count: int) -> None:
    if count != math.prod(tensor.shape):
        raise InvalidRequest(f"input {tensor.name!r}: {count} elements for shape {tensor.shape}")


def _flatten(data: list[Any]) -> list[Any]:
    """Row-major elements of flat or nested JSON lists."""
    flat: list[Any] = []
    for item in data:
        flat.extend(_flatten(item) if isinstance(item, list) else [item])
    return flat
