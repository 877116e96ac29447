"""The keys file (ATTNSERVE_API_KEYS_FILE) kept in force while the server runs: read at start (a file that
cannot be used then stops the start, naming why), then read again whenever it changes (its size, time or
inode, checked every `api_keys_check_s` seconds) and on SIGHUP. A read that parses replaces the callers at
once (`Callers.replace`: requests already in flight are judged again before they are answered); one that
does not keeps the previous callers and logs why. Nothing is restarted and no request is dropped.

The check is a `stat` on the event loop every second or so (microseconds); the file is read only when it
changed, and a read of the same bytes changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import signal
from pathlib import Path

from inference.errors import StartupError
from service.callers import ApiKey, Callers, KeysError, describe, parse_keys
from service.metrics import Metrics

log = logging.getLogger(__name__)
Stamp = tuple[int, int, int]  # (mtime_ns, size, inode)


class KeysFile:
    def __init__(self, path: Path, callers: Callers, metrics: Metrics, single: ApiKey | None = None) -> None:
        self.path, self.callers, self._metrics, self._single = path, callers, metrics, single
        self._stamp: Stamp | None = None
        self._digest = b""
        self._task: asyncio.Task[None] | None = None

    def load(self) -> None:
        """The first read: StartupError when the file cannot be used (the server does not start)."""
        try:
            self._read()
        except (OSError, KeysError) as error:
            raise StartupError(f"API keys file {self.path}: {_reason(error)}") from None

    def reload(self) -> bool:
        """Read the file again; on failure keep the callers in force and log why. True when it parsed."""
        try:
            changed = self._read()
        except (OSError, KeysError) as error:
            if isinstance(error, OSError):
                self._stamp = None  # gone or unreadable: said once, read again when it is back
            log.error("API keys file %s not used, the previous keys stay: %s", self.path, _reason(error))
            self._metrics.keys_read(False, len(self.callers.keys or []))
            return False
        if changed:
            log.info("API keys file %s read: %s", self.path, describe(self.callers.keys or []))
        self._metrics.keys_read(True, len(self.callers.keys or []))
        return True

    def _read(self) -> bool:
        """Parse the file and put its callers in force; False when its bytes are those in force already."""
        stamp, data = _stamp(self.path), self.path.read_bytes()
        self._stamp = stamp  # a file that fails stays failed until it changes again
        digest = hashlib.sha256(data).digest()
        if digest == self._digest:
            return False
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise KeysError("not UTF-8") from None
        self.callers.replace(parse_keys(text, self._single))
        self._digest = digest
        return True

    def changed(self) -> bool:
        try:
            return _stamp(self.path) != self._stamp
        except OSError:
            return self._stamp is not None  # gone: read it (and log why it cannot be) once

    # -- while serving ------------------------------------------------------------------------------
    def start(self, check_s: float) -> None:
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._watch(check_s), name="attnserve-keys-file")
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # no signals off the main thread
            loop.add_signal_handler(signal.SIGHUP, self.reload)

    async def stop(self) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self, check_s: float) -> None:
        while True:
            await asyncio.sleep(check_s)
            if self.changed():
                self.reload()


def _stamp(path: Path) -> Stamp:
    stat = os.stat(path)
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


def _reason(error: Exception) -> str:
    if isinstance(error, OSError):
        return f"cannot be read ({error.strerror or type(error).__name__})"
    return str(error)
