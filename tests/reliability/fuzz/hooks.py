"""Checks the schema fuzzing adds to schemathesis' own (loaded through SCHEMATHESIS_HOOKS by the CLI):

    error_body_by_path           every 4xx/5xx is JSON: the protocol's {"error": message} on /v2, the one
                                 error shape {"error": {"message", "type", "code"}} everywhere else
    positive_data_within_limits  schemathesis' positive_data_acceptance, except a 422 whose code names a
                                 limit no document can state (LIMIT_CODES), and on /v2 inference, where a
                                 tensor's data must fill its shape and an input name may come only once
                                 (JSON Schema cannot state either)
"""

from __future__ import annotations

from typing import Any

import orjson
import schemathesis
from schemathesis import checks

# input_too_long: a text past the model's max length with truncation off, or past max_input_chars (the
# document cannot tie that to `chunking`); the caps: answers whose size depends on the tokens.
# mismatched_pairs: vLLM's /score takes one text_1 or as many as text_2 (a count JSON Schema cannot tie).
LIMIT_CODES = frozenset({"input_too_long", "attention_too_large", "response_too_large", "mismatched_pairs"})


@schemathesis.check
def error_body_by_path(ctx: Any, response: Any, case: Any) -> bool | None:
    if response.status_code < 400:
        return None
    assert response.headers.get("content-type", [""])[0].startswith("application/json"), response.headers
    body = orjson.loads(response.content)
    assert set(body) == {"error"}, body
    if case.path.startswith("/v2") and case.path not in ("/v2/rerank", "/v2/embed"):  # Cohere keeps the one shape
        assert isinstance(body["error"], str), body
    else:
        assert set(body["error"]) == {"message", "type", "code"}, body
        assert all(isinstance(v, str) for v in body["error"].values()), body
    return None


@schemathesis.check
def positive_data_within_limits(ctx: Any, response: Any, case: Any) -> bool | None:
    if case.path.endswith("/infer"):
        return None  # /v2 inference: a tensor's data must fill its shape, and an input name come once
    if response.status_code == 422 and orjson.loads(response.content)["error"]["code"] in LIMIT_CODES:
        return None
    return checks.positive_data_acceptance(ctx, response, case)
