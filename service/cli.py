"""`attnserve serve`: every setting is a flag (and an ATTNSERVE_* variable); flags win.

Models named with --model are found in the bundle cache or made there first (hub.models; a checkpoint's export runs
as `attnserve pull` in a subprocess, so this process never imports torch). The bundles are loaded and verified
before the server binds: a model that cannot be had (hub.errors), an invalid bundle, a missing provider or
variant ends the process with one line naming the fault and exit status 2. SIGTERM drains: uvicorn
stops accepting, admitted requests finish, the lifespan drains the batchers, and the exit status is 0. SIGTERM before
the server binds (during a first start's export) stops the export step too, waits for it and exits with status 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import signal
from typing import Any

import uvicorn
from pydantic import ValidationError

from attnserve.flags import add_flags, given, report
from inference.registry import ServedBundle
from service.settings import Settings

log = logging.getLogger("attnserve")


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Serve bundles, or models by name, over HTTP with "
                                     "onnxruntime.")
    own = [name for name in Settings.model_fields if name in Settings.__annotations__]  # the server's own first
    add_flags(parser, Settings, own + [name for name in Settings.model_fields if name not in own])
    return parser


def read_settings(argv: list[str], prog: str) -> Settings:
    args = build_parser(prog).parse_args(argv)
    return Settings(**given(args, Settings.model_fields))  # type: ignore[arg-type]


def main(argv: list[str], prog: str = "attnserve serve") -> int:
    try:
        settings = read_settings(argv, prog)
    except ValidationError as error:
        return report(prog, error)
    from service import logs

    listener = logs.configure(settings.log_format)
    try:
        return serve(settings)
    finally:
        listener.stop()  # the lines still queued are written


def serve(settings: Settings) -> int:
    from hub.errors import Refused, Reported
    from inference.errors import StartupError
    from inference.registry import load_bundles, served_names
    from service.app import create_app
    from service.deadlines import with_header_timeout

    # The tokenising threads already encode requests side by side; the tokenizers library's own worker pool
    # inside each call only adds threads that spin waiting for work on the cores the graph runs on (measured
    # under 8 bulk callers: 1.2 s of CPU in 8 s, for no more throughput). A value set by the user stays.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for signum in (signal.SIGTERM, signal.SIGINT):  # a stop during the start (an export: minutes) ends it cleanly
        signal.signal(signum, _stop)
    try:
        settings = settings.model_copy(update={"bundle": [*settings.bundle, *named_bundles(settings)]})
        loaded = load_bundles(settings.bundle, settings.load_options())
        served_names(settings.bundle, loaded)
        app = create_app(settings, loaded)  # reads the API keys file
    except Reported:  # the export step wrote its own line
        return 2
    except (StartupError, Refused) as error:
        log.error("cannot start: %s", error)
        return 2
    except _Stopped as stop:  # the export step, if one ran, was stopped and waited for (hub.models.run_to_the_end)
        log.info("stopped by %s before serving", stop)
        return 0
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_config=None, loop="auto", access_log=settings.access_log,
        http=with_header_timeout(settings.header_timeout_s),  # httptools, head deadline
        timeout_graceful_shutdown=drain_seconds(settings), server_header=False,
    )
    # uvicorn re-raises the signal after its graceful shutdown; here that is a clean end, exit status 0
    with contextlib.suppress(_Stopped):
        DrainingServer(config, app).run()
    return 0


def named_bundles(settings: Settings) -> list[ServedBundle]:
    """Each --model's bundle under its served name, from the bundle cache or made there first (hub.models)."""
    if not settings.model:
        return []
    from hub.models import prepare, pull_in_subprocess

    cache = settings.cache()
    exporter = pull_in_subprocess(cache) if settings.export else None
    wanted = [settings.wanted(name, len(settings.model)) for name in settings.model]
    return [ServedBundle(name=w.name.served_name, path=prepare(w, cache, exporter)) for w in wanted]


class DrainingServer(uvicorn.Server):
    """uvicorn's server that, when a signal starts the graceful shutdown, also tells the served models to run
    what waits at once: admitted requests then finish without waiting out batch_wait_ms."""

    def __init__(self, config: uvicorn.Config, app: Any) -> None:
        super().__init__(config)
        self._app = app

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        models = self._app.state.models
        if models is not None:
            asyncio.get_event_loop().call_soon_threadsafe(models.drain)


def drain_seconds(settings: Settings) -> int:
    """uvicorn takes whole seconds; round up, so a drain is never shorter than asked (0.5 s must not become 0,
    which uvicorn reads as "no drain" and which fails every admitted request)."""
    return math.ceil(settings.graceful_timeout_s)


class _Stopped(Exception):
    """SIGTERM or SIGINT reached the process outside uvicorn's own handlers."""


def _stop(signum: int, frame: object) -> None:
    raise _Stopped(signal.Signals(signum).name)
