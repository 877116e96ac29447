"""A server stopped while its first start exports a model: `attnserve serve --model DIR` runs the export as `attnserve
pull` in a subprocess (hub.models), and SIGTERM to the server (a pod deleted, ^C) must stop that export too, not leave
it running on with no one to serve what it makes, and leave nothing in the cache that a later start would serve.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from bench.procs import children, launch, terminate
from hub.cache import is_bundle

pytestmark = pytest.mark.slow


def staged(cache: Path) -> list[Path]:
    """The export's staging directories under the cache (bundle.files.staged_directory's hidden siblings)."""
    return [p for p in cache.rglob(".*.tmp-*") if p.is_dir()]


def wait_for(what, timeout_s: float = 180.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := what():
            return found
        time.sleep(0.05)
    return None


def test_sigterm_during_the_first_export_stops_the_export_and_keeps_nothing(tmp_path):
    from tests.helpers.families import save_hf

    save_hf(tmp_path / "tiny", "bert")
    cache = tmp_path / "cache"
    argv = [sys.executable, "-m", "attnserve", "serve", f"--model=tiny={tmp_path / 'tiny'}", "--variants", "fp32",
            "--cache-dir", str(cache), "--port", "{port}"]
    server = launch("attnserve", argv, tmp_path / "serve.log")
    try:
        assert wait_for(lambda: staged(cache)), f"the export never began:\n{server.log()}"
        (pull,) = children(server.proc.pid)
        assert b"pull" in Path(f"/proc/{pull}/cmdline").read_bytes()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(60)
    finally:
        status = terminate(server)
    assert status == 0, server.log()
    assert not Path(f"/proc/{pull}").exists()  # waited for by the server, not left running
    assert "attnserve pull: stopped by SIGTERM before the bundle was ready" in server.log()
    assert "stopped by SIGTERM before serving" in server.log()
    assert staged(cache) == [] and not [p for p in cache.rglob("manifest.json") if is_bundle(p.parent)]
