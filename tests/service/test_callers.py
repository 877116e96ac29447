"""Callers from a keys file (service.callers, service.keysfile, service.budgets): parsing, budgets on a clock
the test moves, reloads, and the verdicts the API answers with (401, 403, 429 + Retry-After, x-priority),
in process. The timed checks (Retry-After waited out, a rewrite under load) are in
tests/reliability/test_callers.py."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import signal
import time
from pathlib import Path

import pytest

from service.budgets import Budgets
from service.callers import ApiKey, KeysError, parse_keys, single_key
from tests.helpers.fakes import GatedBundle, held
from tests.helpers.metrics import sample
from tests.helpers.serving import assert_error, serving, until
from tests.helpers.tiny import SENTENCES


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def entry(name: str, key: str, priority: str = "interactive", extra: str = "") -> str:
    return f'[[key]]\nname = "{name}"\nsha256 = "{sha(key)}"\npriority = "{priority}"\n{extra}\n'


def write(path: Path, *entries: str) -> Path:
    """The keys file, replaced whole (a rename: a reader never sees half of it)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(entries))
    os.replace(tmp, path)
    return path


def bearer(key: str, **headers: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", **headers}


def embed(client, key: str, inputs: str | list[str] = "x", priority: str | None = None):  # noqa: ANN001, ANN201
    """POST /embed with `key` (and x-priority when given): the coroutine."""
    headers = bearer(key) if priority is None else bearer(key, **{"x-priority": priority})
    return client.post("/embed", json={"inputs": inputs}, headers=headers)


# -- the file -------------------------------------------------------------------------------------------
def test_a_keys_file_parses_into_callers() -> None:
    limits = 'tokens_per_minute = 600\nmodels = ["tiny"]'
    text = entry("search", "s3cret") + entry("backfill", "bulk-key", "bulk", limits)
    search, backfill = parse_keys(text)
    assert (search.name, search.priority, search.tokens_per_minute, search.models) == ("search", "interactive", None,
                                                                                      None)
    assert backfill.priority == "bulk" and backfill.tokens_per_minute == 600
    assert backfill.may_use("tiny") and not backfill.may_use("bert") and search.may_use("bert")
    assert search.digest == hashlib.sha256(b"s3cret").digest()


@pytest.mark.parametrize(("text", "why"), [
    ("[[key]\nname=1", "not TOML"),
    ('[[key]]\nname = "a"\n', "sha256"),
    ('[[key]]\nname = "a"\nsha256 = "abc"\n', "sha256"),
    (entry("a", "k", "urgent"), "priority"),
    (entry("a", "k", extra="tokens_per_minute = 0"), "tokens_per_minute"),
    (entry("a", "k", extra="colour = 'red'"), "colour"),
    (entry("a", "k") + entry("a", "other"), "two keys have the name 'a'"),
    (entry("a", "k") + entry("b", "k"), "two keys have the sha256"),
    (f'[[key]]\nname = "a"\nsha256 = "{sha("")}"\n', "empty key"),
    (entry("bad name", "k"), "name"),
])
def test_a_file_that_cannot_be_used_says_why_and_never_shows_a_hash(text: str, why: str) -> None:
    with pytest.raises(KeysError, match=why) as refused:
        parse_keys(text)
    assert sha("k") not in str(refused.value)


def test_the_single_key_is_one_more_interactive_caller_and_may_not_be_listed_twice() -> None:
    single = single_key("env-key")
    assert [k.name for k in parse_keys(entry("search", "s"), single)] == ["search", "default"]
    with pytest.raises(KeysError, match="ATTNSERVE_API_KEY"):
        parse_keys(entry("someone", "env-key"), single)


# -- budgets, on the test's clock -----------------------------------------------------------------------------
def test_a_spent_budget_says_when_it_is_above_zero_again() -> None:
    now = [0.0]
    budgets = Budgets(lambda: now[0])
    budgets.update([("bulk", 600), ("free", None)])  # 600 tokens a minute: 10 a second
    assert budgets.retry_after("bulk") is None and budgets.retry_after("free") is None
    budgets.spend("bulk", 600 + 125)  # a large request is let in while the level is above 0, then debited
    assert budgets.retry_after("bulk") == 13  # 125 tokens at 10/s: 12.5 s, and above 0 only after it
    now[0] = 12.4
    assert budgets.retry_after("bulk") == 1
    now[0] = 12.5
    assert budgets.retry_after("bulk") == 1  # exactly 0: not above it yet
    now[0] = 12.6
    assert budgets.retry_after("bulk") is None
    now[0] = 10_000
    budgets.spend("bulk", 600)
    assert budgets.retry_after("bulk") == 1  # refilled to a minute's worth, no more: 600 - 600 = 0


def test_a_reload_keeps_a_callers_level_and_drops_the_removed() -> None:
    now = [0.0]
    budgets = Budgets(lambda: now[0])
    budgets.update([("a", 600), ("b", 600)])
    budgets.spend("a", 700)
    budgets.update([("a", 1200)])  # a's budget doubled: its debt stays, refilling faster
    assert budgets.retry_after("a") == 6 and budgets.retry_after("b") is None  # 100 tokens at 20/s: 5 s


def test_a_key_is_compared_with_every_callers_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever key is sent, and wherever its caller is in the file, the same comparisons run: the sha256 of the
    key sent (32 bytes, whatever the key's length) against every caller's, with hmac.compare_digest."""
    import service.callers

    callers = service.callers.Callers()
    callers.replace(parse_keys("".join(entry(f"caller-{i}", f"key-{i}") for i in range(5))))
    compared: list[tuple[int, int]] = []

    def counted(a: bytes, b: bytes) -> bool:
        compared.append((len(a), len(b)))
        return a == b

    monkeypatch.setattr(service.callers.hmac, "compare_digest", counted)
    for key, name in (("key-0", "caller-0"), ("key-4", "caller-4"), ("x" * 500, None), ("", None)):
        compared.clear()
        found = callers.find(service.callers.presented([(b"authorization", f"Bearer {key}".encode())]))
        assert (found.name if found else None) == name
        assert compared == [(32, 32)] * 5, key


# -- the API ------------------------------------------------------------------------------------------------
@pytest.fixture
def keys(tmp_path: Path) -> Path:
    return write(tmp_path / "keys.toml", entry("search", "search-key"),
                 entry("backfill", "bulk-key", "bulk", 'models = ["tiny"]'))


async def test_unknown_keys_get_401_known_ones_are_named_in_the_metrics(tiny_bundle: Path, keys: Path) -> None:
    async with serving(tiny_bundle, api_keys_file=keys, api_key="env-key") as (_, client):
        assert_error(await client.post("/embed", json={"inputs": "x"}), 401, "invalid_api_key")
        assert_error(await client.post("/embed", json={"inputs": "x"}, headers=bearer("nope")), 401)
        for key, texts in (("search-key", ["a"]), ("bulk-key", ["b", "c d"]), ("env-key", ["e", "f", "g h"])):
            answer = await client.post("/embed", json={"inputs": texts}, headers=bearer(key))
            assert answer.status_code == 200
        assert (await client.get("/health")).status_code == 200  # open paths need no key
        metrics = (await client.get("/metrics")).text
    for name, inputs in (("search", 1), ("backfill", 2), ("default", 3)):
        assert sample(metrics, "attnserve_requests_total", route="/embed", caller=name, status="200") == 1
        assert sample(metrics, "attnserve_queue_duration_seconds_count", caller=name) == inputs  # one per input
    assert sample(metrics, "attnserve_requests_total", status="401", caller="") == 2
    assert "search-key" not in metrics and sha("search-key") not in metrics
    assert sample(metrics, "attnserve_api_keys") == 3


async def test_a_model_the_key_may_not_use_is_403(tiny_bundle: Path, tiny_hf_bundle: Path, keys: Path) -> None:
    async with serving([tiny_bundle, f"bert={tiny_hf_bundle}"], api_keys_file=keys) as (_, client):
        allowed = await client.post("/embed", json={"inputs": "x", "model": "tiny"}, headers=bearer("bulk-key"))
        assert allowed.status_code == 200
        refused = await client.post("/embed", json={"inputs": "x", "model": "bert"}, headers=bearer("bulk-key"))
        assert assert_error(refused, 403, "model_not_allowed")["type"] == "permission_error"
        v2 = await client.post("/v2/models/bert/infer", headers=bearer("bulk-key"), json={
            "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["x"]}]})
        assert v2.status_code == 403 and set(v2.json()) == {"error"}
        anyone = await client.post("/embed", json={"inputs": "x", "model": "bert"}, headers=bearer("search-key"))
        assert anyone.status_code == 200


async def test_a_caller_over_its_budget_gets_429_with_retry_after_and_others_do_not(
    tiny_bundle: Path, tmp_path: Path,
) -> None:
    keys = write(tmp_path / "keys.toml", entry("small", "small-key", extra="tokens_per_minute = 60"),
                 entry("other", "other-key"))
    text = " ".join(SENTENCES[:5])  # 48 tokens: the second request is let in (12 left) and overdraws
    async with serving(tiny_bundle, api_keys_file=keys) as (_, client):
        used, started = [], time.monotonic()
        while (answer := await client.post("/v1/embeddings", json={"input": text}, headers=bearer("small-key"))
               ).status_code == 200 and len(used) < 10:
            used.append(answer.json()["usage"]["total_tokens"])
        elapsed = time.monotonic() - started
        error = assert_error(answer, 429, "budget_exceeded")
        debt = sum(used) - 60  # tokens below 0, refilled at 1 a second: the test's own seconds shorten it
        assert len(used) == 2 and math.floor(debt - elapsed) + 1 <= int(answer.headers["retry-after"]) <= debt + 1
        assert "small" in error["message"] and error["type"] == "rate_limit_error"
        assert (await client.post("/embed", json={"inputs": "x"}, headers=bearer("other-key"))).status_code == 200
        for path in ("/info", "/v1/models"):  # only the routes that spend tokens are refused
            assert (await client.get(path, headers=bearer("small-key"))).status_code == 200
        tokenized = await client.post("/tokenize", json={"inputs": "x"}, headers=bearer("small-key"))
        assert tokenized.status_code == 200


async def test_x_priority_lowers_a_requests_class_and_never_raises_it(tiny_bundle: Path, keys: Path) -> None:
    async with serving(tiny_bundle, GatedBundle.around, api_keys_file=keys, max_queue=8,
                       bulk_queue_share=0.25) as (app, client):  # 2 bulk permits
        batcher = app.state.models.default.batcher
        async with held(app, client, headers=bearer("search-key")) as plug:
            lowered = asyncio.create_task(embed(client, "search-key", SENTENCES[:2], priority="bulk"))
            await until(lambda: batcher.depth == 2)
            assert batcher.full_for("bulk") and not batcher.full
            raised = await embed(client, "bulk-key", priority="interactive")
            assert_error(raised, 429, "overloaded")  # still bulk: no bulk permit is free
            assert_error(await embed(client, "search-key", priority="now"), 422, "invalid_priority")
            queued = asyncio.create_task(embed(client, "search-key", SENTENCES[5]))
            await until(lambda: batcher.depth == 3)  # interactive still has permits
        assert [r.status_code for r in await asyncio.gather(plug, lowered, queued)] == [200] * 3


async def test_a_rewritten_file_is_in_force_at_once_and_a_bad_one_keeps_the_keys(
    tiny_bundle: Path, keys: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    async with serving(tiny_bundle, api_keys_file=keys, api_keys_check_s=0.01) as (app, client):
        callers = app.state.callers
        write(keys, entry("search", "search-key"), entry("newcomer", "new-key"))
        await until(lambda: callers.find(hashlib.sha256(b"new-key").digest()) is not None)
        assert (await client.post("/embed", json={"inputs": "x"}, headers=bearer("new-key"))).status_code == 200
        assert_error(await client.post("/embed", json={"inputs": "x"}, headers=bearer("bulk-key")), 401)
        generation = callers.generation
        with caplog.at_level(logging.ERROR, logger="service.keysfile"):
            write(keys, "[[key]]\nname = 'broken'\n")
            await until(lambda: "previous keys stay" in caplog.text)
        assert callers.generation == generation and "sha256" in caplog.text
        assert (await client.post("/embed", json={"inputs": "x"}, headers=bearer("new-key"))).status_code == 200
        metrics = (await client.get("/metrics")).text
        assert sample(metrics, "attnserve_api_keys_reloads_total", outcome="error") == 1


async def test_sighup_reads_the_file_without_waiting(tiny_bundle: Path, keys: Path) -> None:
    async with serving(tiny_bundle, api_keys_file=keys, api_keys_check_s=3600) as (app, client):
        write(keys, entry("only", "only-key"))
        os.kill(os.getpid(), signal.SIGHUP)
        await until(lambda: app.state.callers.find(hashlib.sha256(b"only-key").digest()) is not None)
        assert (await client.post("/embed", json={"inputs": "x"}, headers=bearer("only-key"))).status_code == 200


async def test_a_request_in_flight_is_answered_under_the_keys_in_force_when_it_is_answered(
    tiny_bundle: Path, keys: Path,
) -> None:
    """Admitted under the old file, answered after the new one was read: the revoked key's request gets 401, and
    a caller newly limited to another model 403, not the 200s the old keys would have given."""
    async with serving(tiny_bundle, GatedBundle.around, api_keys_file=keys, api_keys_check_s=3600) as (app, client):
        batcher = app.state.models.default.batcher
        async with held(app, client, headers=bearer("search-key")) as plug:
            revoked = asyncio.create_task(embed(client, "bulk-key", SENTENCES[1]))
            limited = asyncio.create_task(embed(client, "search-key", SENTENCES[2]))
            await until(lambda: batcher.depth == 2)
            write(keys, entry("search", "search-key", extra='models = ["another"]'))
            os.kill(os.getpid(), signal.SIGHUP)
            await until(lambda: app.state.callers.find(hashlib.sha256(b"bulk-key").digest()) is None)
        assert_error(await revoked, 401, "invalid_api_key")
        assert_error(await limited, 403, "model_not_allowed")
        assert (await plug).status_code == 403  # the plug too: judged again when answered


async def test_a_keys_file_that_cannot_be_used_stops_the_start(tiny_bundle: Path, tmp_path: Path) -> None:
    from inference.errors import StartupError

    bad = write(tmp_path / "keys.toml", "[[key]]\nname = 'x'\n")
    with pytest.raises(StartupError, match="keys.toml"):
        async with serving(tiny_bundle, api_keys_file=bad):
            pass
    with pytest.raises(StartupError, match="cannot be read"):
        async with serving(tiny_bundle, api_keys_file=tmp_path / "missing.toml"):
            pass


def test_api_key_entries_are_frozen() -> None:
    key = ApiKey(name="a", sha256=sha("k"))
    with pytest.raises(ValueError):
        key.name = "b"  # type: ignore[misc]


def test_a_removed_or_unreadable_file_keeps_the_keys_and_says_why(tmp_path: Path, caplog) -> None:
    from service.callers import Callers
    from service.keysfile import KeysFile
    from service.metrics import Metrics

    path = write(tmp_path / "keys.toml", entry("search", "search-key"))
    callers = Callers()
    keys_file = KeysFile(path, callers, Metrics())
    keys_file.load()
    path.unlink()
    assert keys_file.changed()
    with caplog.at_level(logging.ERROR, logger="service.keysfile"):
        assert not keys_file.reload()
    assert "cannot be read" in caplog.text and [k.name for k in callers.keys or []] == ["search"]
    assert not keys_file.changed()  # read (and refused) once: not again until it changes
    write(path, entry("search", "search-key"))  # the same keys again: nothing to replace
    generation = callers.generation
    assert keys_file.changed() and keys_file.reload() and callers.generation == generation
