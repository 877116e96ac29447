"""Schema fuzzing: schemathesis generates valid and invalid requests from the app's own OpenAPI document
for every operation, in process (ASGI) and against a real uvicorn process.

Every phase that applies to single requests runs (the schema's examples, the coverage phase's boundary and
negative cases, hypothesis fuzzing), with positive and negative data, and every built-in check runs on
every response, plus the one error shape: no 5xx; every status is one the operation documents; bodies,
content types and headers are the documented ones; data the schema allows is accepted and data it forbids
(wrong types, missing or extra fields, empty lists, booleans for integers) is refused with a 4xx;
undeclared methods get 405 with `Allow`. So the document says exactly what the server accepts.

One exception, and only one: data the schema allows may pass a limit the document cannot state, because
it depends on the loaded bundle or on settings (a layer index at or past num_layers, a token id past the
vocabulary, `dimensions` past hidden_size, more inputs than ATTNSERVE_MAX_INPUTS, an input too long,
a chunk overlap past the model's window, a chunked input of too many windows, an /attention or /embed_all
answer over its cap). Such a request is refused with 422 and one of the error codes in
`LIMIT_CODES`, each of which names its limit; any other refusal of valid data fails.

Budget: the coverage phase sends every case it derives from the document (about 400 over the ten
operations, in each of the two tests, mostly negative); the fuzzing phase then draws `max_examples` per
operation: 100 in process and 30 against uvicorn in CI (the whole file takes about a minute on two
cores), 300 and 300 under `make reliability` (ATTNSERVE_RELIABILITY_FULL=1). Generation is derandomised
in CI so a failure there reproduces; the full run is random and explores further.
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
from schemathesis.config import SchemathesisConfig
from schemathesis.python import asgi

from service.app import create_app
from service.settings import Settings
from tests.reliability import FULL

IN_PROCESS_EXAMPLES = 300 if FULL else 100
LIVE_EXAMPLES = 300 if FULL else 30

# Spelled out rather than left to defaults, so a schemathesis upgrade or a schemathesis.toml cannot
# quietly drop a check, a phase or the negative data.
CONFIG = SchemathesisConfig.from_dict({
    "checks": {"enabled": True},
    "generation": {"mode": "all"},
    "phases": {"examples": {"enabled": True}, "coverage": {"enabled": True}, "fuzzing": {"enabled": True}},
})
LIMIT_CODES = frozenset({"too_many_inputs", "input_too_long", "attention_too_large", "response_too_large",
                         "out_of_range"})


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


def positive_data_within_limits(ctx: Any, response: Any, case: Any) -> bool | None:
    """schemathesis' positive_data_acceptance, except a 422 naming a bundle or settings limit (module docstring)."""
    if response.status_code == 422 and orjson.loads(response.content)["error"]["code"] in LIMIT_CODES:
        return None
    return checks.positive_data_acceptance(ctx, response, case)


ALL_CHECKS = {"additional_checks": [error_body_shape, positive_data_within_limits],
              "excluded_checks": [checks.positive_data_acceptance]}


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
schema = schemathesis.openapi.from_dict(SCHEMA_DOC, config=CONFIG).exclude(path_regex="^/v2")


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
    case.call_and_validate(app=fuzzed_app, **ALL_CHECKS)


@schema.parametrize()
@fuzz_settings(LIVE_EXAMPLES)
def test_fuzz_uvicorn(case: schemathesis.Case, live_url: str) -> None:
    case.call_and_validate(base_url=live_url, timeout=30, **ALL_CHECKS)
