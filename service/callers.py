"""Callers: who a request is, from its bearer key, and what that caller may do.

A caller is an entry of the keys file (ATTNSERVE_API_KEYS_FILE, TOML, re-read by `service.keysfile`):

    [[key]]
    name = "search-frontend"            # its name in metrics and logs (never the key)
    sha256 = "<hex sha256 of the key>"  # the key itself is never stored
    priority = "interactive"            # or "bulk" (default interactive)
    tokens_per_minute = 600000          # optional: its budget
    models = ["default"]                # optional: the models it may use (default all)

ATTNSERVE_API_KEY, when set, is one more interactive caller named "default" with no budget and every model.
With neither set, every request is the anonymous interactive caller "" and no key is asked for.

The edge (`service.middleware`) asks `Callers.verdict` before reading a body: the presented key's sha256 is
compared with every caller's in constant time (`hmac.compare_digest` over all of them, no early exit), an
unknown key is 401, a spent budget 429 with Retry-After (`service.budgets`), and `x-priority: bulk` lowers
the request's class (a request never raises it: `x-priority: interactive` from a bulk caller stays bulk).
The route's model is checked by `may_use` (403). The verdict carries the keys' generation: when the keys
change while a request is in flight, `recheck` judges it again under the new keys before its answer starts,
so no request is answered under keys no longer in force.
"""

from __future__ import annotations

import hashlib
import hmac
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from inference.errors import InferenceError, InvalidRequest
from inference.scheduling.fairqueue import Caller, Priority
from service.budgets import Budgets
from service.errors import Forbidden, OverBudget, Unauthorized, describe_validation

SINGLE_KEY_NAME = "default"  # the caller ATTNSERVE_API_KEY stands for
PRIORITY_HEADER = b"x-priority"


class ApiKey(BaseModel):
    """One [[key]] entry of the keys file."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")
    sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$")
    priority: Priority = "interactive"
    tokens_per_minute: int | None = Field(None, ge=1)
    models: list[str] | None = None

    @field_validator("sha256")
    @classmethod
    def _not_the_empty_key(cls, value: str) -> str:
        if value.lower() == hashlib.sha256(b"").hexdigest():
            raise ValueError("is the sha256 of the empty key")
        return value.lower()

    def may_use(self, model: str) -> bool:
        return self.models is None or model in self.models

    @property
    def digest(self) -> bytes:
        return bytes.fromhex(self.sha256)


class KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    key: list[ApiKey] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> KeysFile:
        for what in ("name", "sha256"):
            values = [getattr(k, what).lower() for k in self.key]
            if repeated := sorted({v for v in values if values.count(v) > 1}):
                shown = repeated[0] if what == "name" else repeated[0][:12] + "..."
                raise ValueError(f"two keys have the {what} {shown!r}")
        return self


class KeysError(ValueError):
    """The keys file cannot be used; the message says where and why (never a key's hash in full)."""


def parse_keys(text: str, single: ApiKey | None = None) -> list[ApiKey]:
    """The callers of a keys file's text, plus `single` (ATTNSERVE_API_KEY's caller); KeysError otherwise."""
    try:
        keys = KeysFile.model_validate(tomllib.loads(text)).key
    except tomllib.TOMLDecodeError as error:
        raise KeysError(f"not TOML: {error}") from None
    except ValidationError as error:
        raise KeysError(describe_validation(error.errors())) from None
    return _with_single(keys, single)


def single_key(secret: str) -> ApiKey:
    return ApiKey(name=SINGLE_KEY_NAME, sha256=hashlib.sha256(secret.encode()).hexdigest())


def _with_single(keys: list[ApiKey], single: ApiKey | None) -> list[ApiKey]:
    if single is None:
        return keys
    if any(k.name == single.name or k.digest == single.digest for k in keys):
        raise KeysError(f"a key is named {single.name!r} or has ATTNSERVE_API_KEY's sha256; that caller is "
                        "ATTNSERVE_API_KEY's")
    return [*keys, single]


@dataclass(frozen=True)
class Verdict:
    """Who a request is: its key (None: no keys configured), its caller for the core (class lowered by
    x-priority), the digest it presented and the keys' generation that judged it."""

    key: ApiKey | None
    caller: Caller
    digest: bytes = b""
    generation: int = 0


@dataclass
class Callers:
    """The callers in force (None: no key asked for), their budgets, and a generation that moves on each change."""

    keys: list[ApiKey] | None = None
    budgets: Budgets = field(default_factory=Budgets)
    generation: int = 0

    def replace(self, keys: list[ApiKey]) -> None:
        self.keys = keys
        self.budgets.update((k.name, k.tokens_per_minute) for k in keys)
        self.generation += 1

    def verdict(self, headers: Sequence[tuple[bytes, bytes]], spends: bool = True) -> Verdict:
        """The request's caller, or Unauthorized (401), OverBudget (429: only for a request that `spends` tokens,
        one to a batched route) or InvalidRequest (a bad x-priority)."""
        if self.keys is None:
            return Verdict(None, Caller("", lowered("interactive", headers)))
        digest = presented(headers)
        key = self.find(digest)
        if key is None:
            raise Unauthorized("missing or wrong API key; send `Authorization: Bearer <key>`")
        if spends and (wait := self.budgets.retry_after(key.name)) is not None:
            raise OverBudget(f"caller {key.name} has spent its budget of {key.tokens_per_minute} tokens per "
                             f"minute; retry after {wait} s", retry_after_s=wait)
        return Verdict(key, Caller(key.name, lowered(key.priority, headers)), digest, self.generation)

    def find(self, digest: bytes) -> ApiKey | None:
        """The caller whose key has this sha256, comparing with every caller's (constant time in the key)."""
        found = None
        for key in self.keys or []:
            if hmac.compare_digest(digest, key.digest):
                found = key
        return found

    def recheck(self, verdict: Verdict, model: str | None) -> InferenceError | None:
        """The refusal the keys in force now give a request judged as `verdict` (None: it stands)."""
        if verdict.key is None or verdict.generation == self.generation:
            return None
        key = self.find(verdict.digest)
        if key is None:
            return Unauthorized("missing or wrong API key; send `Authorization: Bearer <key>`")
        return forbidden(key, model)

    def spend(self, verdict: Verdict, tokens: int) -> None:
        if verdict.key is not None:
            self.budgets.spend(verdict.key.name, tokens)


def forbidden(key: ApiKey | None, model: str | None) -> InferenceError | None:
    """Forbidden (403) when `key` may not use `model`."""
    if key is None or model is None or key.may_use(model):
        return None
    return Forbidden(f"caller {key.name} may not use model {model[:64]!r}")


def presented(headers: Sequence[tuple[bytes, bytes]]) -> bytes:
    """sha256 of the bearer key sent (of "" when none was)."""
    scheme, _, token = (_header(headers, b"authorization") or "").partition(" ")
    secret = token.strip() if scheme.lower() == "bearer" else ""
    return hashlib.sha256(secret.encode("latin-1")).digest()


def lowered(priority: Priority, headers: Sequence[tuple[bytes, bytes]]) -> Priority:
    """The class a request runs in: its caller's, or bulk when it asks for bulk (never raised)."""
    asked = (_header(headers, PRIORITY_HEADER) or priority).strip().lower()
    if asked not in ("interactive", "bulk"):
        raise InvalidRequest("x-priority must be interactive or bulk", code="invalid_priority")
    return "bulk" if asked == "bulk" else priority


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def describe(keys: list[ApiKey]) -> dict[str, Any]:
    """What a log line says of the keys in force: counts by class, never a hash."""
    return {"callers": len(keys), "bulk": sum(k.priority == "bulk" for k in keys),
            "with budget": sum(k.tokens_per_minute is not None for k in keys)}
