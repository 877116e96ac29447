"""The bundle cache: bundles made from (or downloaded as) named models, found again with no hub and no torch.

    {root}/models/{namespace}--{name}/
        refs/{revision}           the commit a branch or tag resolved to when it was last served, so that a stopped
                                  hub (or HF_HUB_OFFLINE=1) still finds a revision served before
        {commit}/bundle/          a repository that holds an attnserve bundle, as published, verified
        {commit}/{shape}/         an export of the repository's checkpoint: shape says what made it besides the
                                  commit, `schema{N}-{variants}[-reranker-{recipe}]` (N: the manifest schema export
                                  writes, bundle.manifest.SCHEMA_VERSION)
    {root}/local/{dirname}-{path hash}/{files hash}/{shape}/   an export of a local directory, by its files' names,
                                  sizes and modification times

Every bundle is built beside its place (a `.{shape}.download` directory for the downloaded files, kept after a
failure so a retry fetches only what is missing, and a staged directory for the bundle) and renamed into place only
once complete and verified: a bundle in the cache is whole. Making one holds a lock beside its place
(`.{shape}.lock`, flock): a second process making the same bundle at once (two pods' init steps on one shared volume,
two servers started together) waits for the first, then finds the bundle made. The root: --cache-dir
(ATTNSERVE_CACHE_DIR), else $XDG_CACHE_HOME/attnserve, else ~/.cache/attnserve.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from bundle.files import write_text_atomic
from bundle.manifest import MANIFEST_NAME, SCHEMA_VERSION
from hub.errors import disk_refusal
from hub.names import COMMIT

log = logging.getLogger(__name__)
BUNDLE_SHAPE = "bundle"  # a repository's own bundle: no export shaped it


def default_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnserve"


def shape_key(variants: Sequence[str], reranker: str | None) -> str:
    """What shapes an export besides its source: the manifest schema, the variants (in canonical order), the
    reranker recipe."""
    return f"schema{SCHEMA_VERSION}-{'+'.join(variants)}" + (f"-reranker-{reranker}" if reranker else "")


def download_dir(target: Path) -> Path:
    """Where the files a bundle at `target` is made from are downloaded: beside it, hidden."""
    return target.parent / f".{target.name}.download"


def is_bundle(path: Path) -> bool:
    return (path / MANIFEST_NAME).is_file()


@dataclass(frozen=True)
class BundleCache:
    root: Path

    @classmethod
    def at(cls, directory: Path | None) -> BundleCache:
        return cls(Path(directory).expanduser() if directory is not None else default_root())

    def bundle_dir(self, repo: str, commit: str, shape: str) -> Path:
        return self._repo(repo) / commit / shape

    def find(self, repo: str, commit: str, shape: str) -> Path | None:
        """The commit's bundle here: the repository's own, else an export of this shape; None when neither."""
        found = (self.bundle_dir(repo, commit, s) for s in (BUNDLE_SHAPE, shape))
        return next((path for path in found if is_bundle(path)), None)

    def local_dir(self, directory: Path, shape: str) -> Path:
        directory = directory.resolve()
        where = hashlib.sha256(str(directory).encode()).hexdigest()[:12]
        return self.root / "local" / f"{directory.name}-{where}" / files_hash(directory) / shape

    def recorded(self, repo: str, revision: str) -> str | None:
        """The commit `revision` resolved to when it was last served from here."""
        path = self._ref(repo, revision)
        commit = path.read_text().strip() if path.is_file() else ""
        return commit if COMMIT.match(commit) else None

    def record(self, repo: str, revision: str, commit: str) -> None:
        path = self._ref(repo, revision)
        with writing(self.root):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, commit + "\n")

    def check_writable(self) -> None:
        """Refused, in one line, when nothing can be written under the root (made if missing)."""
        with writing(self.root):
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.root):
                pass

    def _repo(self, repo: str) -> Path:
        return self.root / "models" / repo.replace("/", "--")

    def _ref(self, repo: str, revision: str) -> Path:
        return self._repo(repo) / "refs" / quote(revision, safe="")


def files_hash(directory: Path) -> str:
    """What identifies a local directory's content cheaply: its files' relative names, sizes and modification times."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(directory)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


@contextmanager
def writing(where: Path) -> Iterator[None]:
    """An OSError while writing under `where` as one line: a full disk, or a directory that cannot be written."""
    try:
        yield
    except OSError as err:
        raise disk_refusal(err, where) from None


@contextmanager
def making(target: Path) -> Iterator[bool]:
    """Held while the cache's bundle at `target` is made (module docstring); yields whether it still has to be made:
    False when another process made it while this one waited. Only for the cache's own places (pull --out replaces
    what is there and leaves no lock file beside it). The lock file stays: removing it while a third process waits
    on it would let that one lock a file nobody else sees."""
    with writing(target.parent):
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = (target.parent / f".{target.name}.lock").open("a")
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another process is making %s; waiting for it", target)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield not is_bundle(target)
