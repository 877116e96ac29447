"""The server's settings and command line: environment, flags, validation, documentation, drain, log lines."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.cli import build_parser, drain_seconds, read_settings
from service.logs import JsonFormatter
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


def test_graceful_drain_is_never_rounded_down_to_none():
    assert [drain_seconds(Settings(bundle="b", graceful_timeout_s=s)) for s in (0.5, 1.0, 8.2)] == [1, 1, 9]


def test_json_log_lines():
    record = logging.LogRecord("attnserve", logging.ERROR, __file__, 1, "cannot start: %s", ("bad",), None)
    entry = json.loads(JsonFormatter().format(record))
    assert entry["level"] == "error" and entry["message"] == "cannot start: bad" and entry["time"].endswith("Z")
