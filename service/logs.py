"""Logging set-up: plain text or one JSON object per line (ATTNSERVE_LOG_FORMAT), written by a thread of its
own, never by the event loop.

Every request logs a line (uvicorn's access log). Formatted and written on the event loop, those lines cost
the loop time on every request, now and then far more (docs/reliability.md measures it), and a stderr whose
reader falls behind (a pipe to a container runtime) blocks the write, and with it every request. So the loop
only puts each record on a queue (`QueueHandler`); a `QueueListener` thread formats and writes them.
`configure` returns the listener: stop it at exit, so the last lines are written.
"""

from __future__ import annotations

import logging
import logging.handlers
import queue
import sys
import time

import orjson


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage(),
        }
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


class _Enqueue(logging.handlers.QueueHandler):
    """Puts the record itself on the queue: the listener is in this process, so nothing needs pickling. Only its
    message is merged now (its arguments may change later); the formatting is the listener's."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        record.msg, record.args = record.getMessage(), None
        return record


def configure(log_format: str, level: int = logging.INFO) -> logging.handlers.QueueListener:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = logging.handlers.QueueListener(records, handler)
    root = logging.getLogger()
    root.handlers[:] = [_Enqueue(records)]
    root.setLevel(level)
    listener.start()
    return listener
