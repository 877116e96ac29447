"""File helpers shared by everything that writes or checks bundles and checkpoints.

    sha256_file         hex sha256 of a file, read in blocks
    staged_directory    build a directory next to its target and swap it in only when complete
    write_text_atomic   replace one file's content all at once

A directory is never deleted before its replacement is in place: the old one is renamed aside, the
new one renamed in, then the old one removed. A crash at any point leaves either the old directory
or the new one at the target path (plus a hidden leftover beside it), never neither.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def staged_directory(target: Path) -> Iterator[Path]:
    """Yield an empty sibling of `target`; on success it replaces `target`, on failure it is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield staging
        os.chmod(staging, 0o755)  # mkdtemp makes it owner-only; bundles and checkpoints are shared read-only
        _swap_in(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _swap_in(staging: Path, target: Path) -> None:
    if not target.exists():
        staging.rename(target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    old.rmdir()  # only its unique name is wanted
    target.rename(old)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary sibling and rename it over `path` (readers see old or new, never half)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
