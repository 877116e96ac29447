"""Schema fuzzing: schemathesis generates valid and invalid requests from the app's own OpenAPI document
for every operation, in process (ASGI) and against a real uvicorn process.

Checks on every response: no 5xx; every status is one the operation documents; bodies match the
documented schemas (so every error is `{"error": {"message", "type", "code"}}`); the content type is
the documented one.

Budget: `make reliability` (ATTNSERVE_RELIABILITY_FULL=1) runs 300 generated examples per operation in
process and 300 against uvicorn; CI runs 100 in process and 30 against uvicorn so that all of
tests/reliability stays within a few minutes on two cores. Generation is derandomised so a CI
failure reproduces; the full run explores further.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import checks
from schemathesis.python import asgi

from service.app import create_app
from service.settings import Settings
from tests.reliability import FULL

IN_PROCESS_EXAMPLES = 300 if FULL else 100
LIVE_EXAMPLES = 300 if FULL else 30


def error_body_shape(ctx: Any, response: Any, case: Any) -> bool | None:
    """Every 4xx/5xx, documented or not (404, 405 too), is the one JSON error shape."""
    if response.status_code < 400:
        return None
    assert response.headers.get("content-type", [""])[0].startswith("application/json"), response.headers
    body = orjson.loads(response.content)
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "code"}, body
    assert all(isinstance(v, str) for v in body["error"].values()), body
    return None


CHECKS = [
    checks.not_a_server_error, checks.status_code_conformance, checks.response_schema_conformance,
    checks.content_type_conformance, error_body_shape,
]


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples, deadline=None, derandomize=not FULL, database=None, print_blob=True,
        suppress_health_check=list(HealthCheck),
    )


# The OpenAPI document does not depend on the bundle (routes are static), so it is read once at import
# from an app that is never started; each test then sends its cases to a started app or a real server.
# (schemathesis.pytest.from_fixture would load it from a fixture, but needs a pytest < 9 internal.)
SCHEMA_DOC = create_app(Settings(bundle=Path("unused"))).openapi()
# The /v2 routes answer errors in their protocol's own body: tests/reliability/test_v2_schema_fuzz.py.
schema = schemathesis.openapi.from_dict(SCHEMA_DOC).exclude(path_regex="^/v2")


@pytest.fixture(scope="module")
def fuzzed_app(tiny_bundle: Path) -> Iterator[Any]:
    app = create_app(Settings(bundle=tiny_bundle, intra_op_threads=1, max_inputs=32))
    assert app.openapi() == SCHEMA_DOC
    yield app
    asgi.shutdown_lifespans()  # schemathesis started the app's lifespan on its first request


@pytest.fixture(scope="module")
def live_url(live_server: str) -> str:
    import httpx

    assert httpx.get(f"{live_server}/openapi.json").json() == orjson.loads(orjson.dumps(SCHEMA_DOC))
    return live_server


@schema.parametrize()
@fuzz_settings(IN_PROCESS_EXAMPLES)
def test_fuzz_in_process(case: schemathesis.Case, fuzzed_app: Any) -> None:
    case.call_and_validate(app=fuzzed_app, checks=CHECKS)


@schema.parametrize()
@fuzz_settings(LIVE_EXAMPLES)
def test_fuzz_uvicorn(case: schemathesis.Case, live_url: str) -> None:
    case.call_and_validate(base_url=live_url, checks=CHECKS, timeout=30)
