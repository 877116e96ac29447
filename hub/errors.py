"""Why a named model cannot be served or pulled, each said in one line (the command line prints it and exits with
status 2, never a traceback):

    Refused          no such repository, revision or file; a gated or private one without a token; an architecture
    │                attnserve does not load; the cache cannot be written or the disk is full; nothing cached where
    │                nothing may be fetched (--no-export)
    ├── Unreachable  the hub cannot be reached (or HF_HUB_OFFLINE=1) for what the cache does not hold
    └── Reported     the export step (a subprocess) refused and said why itself
"""

from __future__ import annotations

import errno
from pathlib import Path


class Refused(Exception):
    """The model cannot be served; the message is the one line that says why."""


class Unreachable(Refused):
    """The hub cannot be reached, or may not be (HF_HUB_OFFLINE=1)."""


class Reported(Refused):
    """Refused by the export step, which has already written its own line."""


def disk_refusal(err: OSError, where: Path) -> Refused:
    """An OSError met writing under `where`, in one line: the disk is full, or the directory cannot be written."""
    if err.errno == errno.ENOSPC:
        return Refused(f"no space left on the device that holds {where}")
    named = f" ({err.filename})" if err.filename and str(err.filename) != str(where) else ""
    return Refused(f"cannot write under {where}: {err.strerror or err}{named}")
