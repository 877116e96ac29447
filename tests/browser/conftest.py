"""Fixtures of the browser tests: Debian's Chromium driven by Playwright, one page per test, watched.

The browser is /usr/bin/chromium (Debian's `chromium`, which `make install` installs with apt), never one that
Playwright downloads. Where it is missing these tests fail rather than skip: CI's `make install` provides it.

    browser   a headless Chromium for a test module (no background networking, a fresh temporary profile)
    watched   a new page in a fresh context (empty session storage) whose requests, console messages and
              page errors are recorded; any request not to 127.0.0.1 is recorded and aborted
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.browser.watch import Watched

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
# Without the background-networking flags Chromium contacts Google hosts on its own (updates, sync, field trials).
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
    "--disable-background-networking", "--disable-component-update", "--disable-default-apps",
    "--disable-features=Translate,OptimizationHints,MediaRouter",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Module-scoped, not session: Playwright's sync API keeps an event loop running in this thread while it
    is open, and the async tests of later modules need the thread's loop free."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make install` installs Debian's chromium (apt-get install chromium)")
    with sync_playwright() as playwright:  # launch() gives the browser a fresh temporary profile of its own
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def watched(browser: Browser) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    watch = Watched(context.new_page())
    context.route("**/*", watch.route)
    yield watch
    context.close()
