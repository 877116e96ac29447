"""File helpers shared by everything that writes or checks bundles and checkpoints.

    sha256_file         hex sha256 of a file, read in blocks
    staged_directory    build a directory next to its target and swap it in only when complete
    written_whole       a temporary sibling to write, renamed over the target only once complete
    write_text_atomic   replace one file's content all at once

A directory is never deleted before its replacement is in place. On Linux the complete new directory
and the old one trade places in one `renameat2(RENAME_EXCHANGE)` call, so the target path always
holds one whole directory, the old or the new, whatever moment a crash comes; the old one is then
removed. Elsewhere (or on a filesystem without the exchange) the old directory is renamed aside and
the new one renamed in: a crash between those two renames leaves the old directory beside the target
under a hidden `.NAME.old-*` name, and a failed second rename puts it back.
"""

from __future__ import annotations

import ctypes
import errno
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
    elif _exchange(staging, target):
        shutil.rmtree(staging, ignore_errors=True)  # the old directory now sits at the staging path
    else:
        _rename_aside_then_in(staging, target)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with Linux's renameat2(RENAME_EXCHANGE); False where that is unavailable."""
    rename = getattr(_libc(), "renameat2", None)
    if rename is None:
        return False
    if rename(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):  # kernel or filesystem without the exchange
        return False
    raise OSError(error, os.strerror(error), str(b))


def _rename_aside_then_in(staging: Path, target: Path) -> None:
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    old.rmdir()  # only its unique name is wanted
    target.rename(old)
    try:
        staging.rename(target)
    except BaseException:
        old.rename(target)
        raise
    shutil.rmtree(old, ignore_errors=True)


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


@contextmanager
def written_whole(path: Path, keep_empty: bool = True) -> Iterator[Path]:
    """A temporary sibling of `path` to write; renamed over `path` (readers see old or new, never half) when
    the block ends without an error, removed otherwise, and also when it is empty and `keep_empty` is false."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if keep_empty or tmp.stat().st_size:
            os.chmod(tmp, 0o644)  # mkstemp makes it owner-only
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary sibling and rename it over `path` (readers see old or new, never half)."""
    with written_whole(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
