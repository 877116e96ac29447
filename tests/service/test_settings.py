"""The server's settings and command line: environment, flags, validation, documentation, drain, log lines."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.cli import build_parser, drain_seconds, read_settings
from service.logs import JsonFormatter, configure
from service.settings import Settings, settings_table


def test_settings_from_environment_and_validation(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNSERVE_BUNDLE", f"{tmp_path},second={tmp_path / 'b'}")
    monkeypatch.setenv("ATTNSERVE_MAX_BATCH_SIZE", "8")
    monkeypatch.setenv("ATTNSERVE_CORS_ORIGINS", "http://a.example, http://b.example")
    monkeypatch.setenv("ATTNSERVE_API_KEY", "zz-secret-zz")
    settings = Settings()
    assert settings.max_batch_size == 8 and settings.batch_options().max_batch_size == 8
    assert [(b.name, b.path) for b in settings.bundle] == [(None, tmp_path), ("second", tmp_path / "b")]
    assert settings.cors_origins == ["http://a.example", "http://b.example"]
    assert "zz-secret-zz" not in repr(settings)
    with pytest.raises(ValidationError):
        Settings(max_batch_size=0)
    with pytest.raises(ValidationError):
        Settings(provider="tpu")
    for name, field in Settings.model_fields.items():
        assert field.description, name


def test_cli_flags_override_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNSERVE_PORT", "9000")
    settings = read_settings(["--bundle", str(tmp_path), "--port", "9100", "--no-truncate", "--variant", "fp32"],
                             "attnserve serve")
    assert settings.port == 9100 and settings.truncate is False and settings.variant == "fp32"
    assert settings.load_options().variant == "fp32" and settings.request_limits().truncate is False


def test_every_setting_is_a_flag_with_its_description():
    text = build_parser("attnserve serve").format_help()
    for name in Settings.model_fields:
        assert f"--{name.replace('_', '-')}" in text and f"ATTNSERVE_{name.upper()}" in text, name


def test_service_readme_documents_every_setting_as_it_is():
    readme = (Path(__file__).resolve().parents[2] / "service" / "README.md").read_text()
    for row in settings_table().splitlines():
        assert row in readme, row


@pytest.mark.parametrize(("name", "value"), [("bulk_share", 0), ("bulk_share", 1), ("bulk_queue_share", 0),
                                             ("bulk_queue_share", 1.5), ("cache_bytes", -1), ("api_keys_check_s", 0)])
def test_the_traffic_settings_refuse_what_cannot_work(name, value):
    with pytest.raises(ValidationError):
        Settings(bundle="b", **{name: value})


def test_graceful_drain_is_never_rounded_down_to_none():
    assert [drain_seconds(Settings(bundle="b", graceful_timeout_s=s)) for s in (0.5, 1.0, 8.2)] == [1, 1, 9]


def test_json_log_lines():
    record = logging.LogRecord("attnserve", logging.ERROR, __file__, 1, "cannot start: %s", ("bad",), None)
    entry = json.loads(JsonFormatter().format(record))
    assert entry["level"] == "error" and entry["message"] == "cannot start: bad" and entry["time"].endswith("Z")


def test_log_lines_are_written_by_the_listener_thread_and_all_written_at_stop(capfd) -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    listener = configure("json")
    try:
        writers: list[str] = []
        listener.handlers[0].emit = _recording(listener.handlers[0].emit, writers)  # type: ignore[method-assign]
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("attnserve").exception("request %s failed", 7)
        for n in range(50):
            logging.getLogger("uvicorn.access").info("line %d", n)
    finally:
        listener.stop()
        root.handlers[:], root.level = handlers, level
    lines = [json.loads(line) for line in capfd.readouterr().err.splitlines()]
    assert [entry["message"] for entry in lines] == ["request 7 failed", *(f"line {n}" for n in range(50))]
    assert "ValueError: boom" in lines[0]["traceback"]
    assert set(writers) == {"listener"}  # never the caller's thread


def _recording(emit, writers: list[str]):  # noqa: ANN001, ANN202
    def recorded(record: logging.LogRecord) -> None:
        writers.append("listener" if threading.current_thread() is not threading.main_thread() else "caller")
        emit(record)

    return recorded
