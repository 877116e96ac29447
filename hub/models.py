"""A named model to the bundle that serves it, found in the bundle cache (hub.cache) or made there first:

    resolve  the revision to a commit: asked of the hub (which lists the commit's files too), and recorded in the
             cache once the commit's bundle is there; when the hub cannot be reached (or HF_HUB_OFFLINE=1), the
             commit recorded when the revision was last served; a commit as the revision is taken as it is
    find     the commit's bundle in the cache: the repository's own, or an export of the wanted shape
    make     a repository that holds an attnserve bundle (manifest.json at its root): downloaded and verified here,
             torch-free (hub.fetch); a checkpoint: by the export step, an `Exporter` (attnserve serve runs `attnserve
             pull` in a subprocess for it, so the server never imports torch; attnserve pull runs export/pull.py's
             in its own process)

A local directory is served as it is when it is a bundle; else it is a checkpoint, exported into the cache by its
files (names, sizes, modification times).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bundle.manifest import MANIFEST_NAME
from hub import remote
from hub.cache import BUNDLE_SHAPE, BundleCache, is_bundle, making, writing
from hub.errors import Refused, Reported, Unreachable
from hub.fetch import fetch_bundle
from hub.names import COMMIT, DEFAULT_REVISION
from hub.options import Wanted

log = logging.getLogger(__name__)
STOP_GRACE_S = 30.0  # how long a stopped export step gets to remove what it staged before it is killed


@dataclass(frozen=True)
class Source:
    """What the export step makes a bundle from: a hub snapshot, or a local directory."""

    snapshot: remote.Snapshot | None = None
    directory: Path | None = None

    def __str__(self) -> str:
        return str(self.snapshot or self.directory)


Exporter = Callable[[Source, Wanted, Path], None]  # makes the bundle of Source at the Path, or raises Refused


def prepare(wanted: Wanted, cache: BundleCache, exporter: Exporter | None, out: Path | None = None) -> Path:
    """The bundle directory that serves `wanted`, from the cache or made there; `exporter` None: only what the cache
    holds (--no-export). With `out`, made at `out` whatever the cache holds (attnserve pull --out)."""
    directory = wanted.name.directory
    if directory is not None:
        return _local(directory, wanted, cache, exporter, out)
    repo, revision = wanted.name.checked_repo(), wanted.name.revision or DEFAULT_REVISION
    commit, snapshot = resolve(repo, revision, cache)
    found = cache.find(repo, commit, wanted.shape) if out is None else None
    if found is None:
        if exporter is None:
            raise Refused(f"the cache {cache.root} holds no bundle of {wanted.name} (commit {commit}) as --no-export "
                          "needs; run attnserve pull for it, or serve without --no-export")
        if out is not None:
            check_target(out)
        else:
            cache.check_writable()
        found = _make(snapshot or remote.snapshot(repo, commit), wanted, exporter, cache, out)
    if out is None and revision != commit:
        _record(cache, repo, revision, commit)
    return found


def resolve(repo: str, revision: str, cache: BundleCache) -> tuple[str, remote.Snapshot | None]:
    """(commit, the hub's snapshot of it when asked): see the module's docstring."""
    if COMMIT.match(revision):
        return revision, None
    try:
        snapshot = remote.snapshot(repo, revision)
    except Unreachable as err:
        commit = cache.recorded(repo, revision)
        if commit is None:
            raise Unreachable(f"{err}, and {repo}@{revision} was never served from the cache {cache.root}") from None
        log.info("%s; %s@%s is commit %s, as when it was last served", err, repo, revision, commit)
        return commit, None
    log.info("%s@%s is commit %s", repo, revision, snapshot.commit)
    return snapshot.commit, snapshot


def check_target(out: Path) -> None:
    """Refused when `out` holds something other than a bundle: pull --out replaces a bundle, nothing else."""
    if out.exists() and not is_bundle(out) and (not out.is_dir() or any(out.iterdir())):
        raise Refused(f"{out} exists and is not a bundle; refusing to replace it")


def _record(cache: BundleCache, repo: str, revision: str, commit: str) -> None:
    """The commit `revision` resolved to, recorded for a start without the hub; a cache mounted read-only (bundles
    pulled into it beforehand) still serves, with a warning that a stopped hub will not resolve the revision."""
    if cache.recorded(repo, revision) == commit:
        return
    try:
        cache.record(repo, revision, commit)
    except Refused as err:
        log.warning("%s@%s is not recorded as commit %s (%s): without the hub it will not resolve", repo, revision,
                    commit, err)


def _make(snapshot: remote.Snapshot, wanted: Wanted, exporter: Exporter, cache: BundleCache, out: Path | None) -> Path:
    if MANIFEST_NAME in snapshot.files:
        if wanted.reranker is not None:
            raise Refused(f"{snapshot} holds a bundle, served as it is: it takes no reranker recipe")
        target = out or cache.bundle_dir(snapshot.repo, snapshot.commit, BUNDLE_SHAPE)
        with making(target) if out is None else contextlib.nullcontext(True) as needed:
            if needed:
                fetch_bundle(snapshot, target)
    else:
        target = out or cache.bundle_dir(snapshot.repo, snapshot.commit, wanted.shape)
        export(exporter, Source(snapshot=snapshot), wanted, target)
    return target


def _local(directory: Path, wanted: Wanted, cache: BundleCache, exporter: Exporter | None, out: Path | None) -> Path:
    """A local directory's bundle: the directory itself when it is one, else its export in the cache (or at `out`)."""
    if is_bundle(directory):
        if out is not None:
            raise Refused(f"{directory} is a bundle already; serve it with --bundle (or --model) as it is")
        return directory
    if out is not None:
        check_target(out)
    target = out or cache.local_dir(directory, wanted.shape)
    if out is None and is_bundle(target):
        return target
    if exporter is None:
        raise Refused(f"the cache {cache.root} holds no bundle of {directory} as it is now, as --no-export needs")
    with writing(target.parent):
        target.parent.mkdir(parents=True, exist_ok=True)
    export(exporter, Source(directory=directory.resolve()), wanted, target)
    return target


def export(exporter: Exporter, source: Source, wanted: Wanted, target: Path) -> None:
    """The export step, refused up front where this install cannot run it: without torch or export/ (the image
    serves bundles only)."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("export") is None:
        raise Refused(f"{source} is a checkpoint: exporting it needs attnserve's export side (torch, the train extra), "
                      "which this install lacks; pull it where that is and serve the bundle, or name a repository "
                      "that holds a bundle")
    exporter(source, wanted, target)


def pull_in_subprocess(cache: BundleCache) -> Exporter:
    """The export step as `attnserve pull` in a subprocess of this Python (the server never imports torch): its
    progress and its refusal on this process's stderr, every option from here (no ATTNSERVE_* variable)."""
    def pull(source: Source, wanted: Wanted, target: Path) -> None:
        argv = [sys.executable, "-m", "attnserve", "pull", str(source), "--cache-dir", str(cache.root),
                "--variants", ",".join(wanted.variants), *(["--reranker", wanted.reranker] if wanted.reranker else [])]
        log.info("exporting %s into the cache (attnserve pull)", source)
        env = {key: value for key, value in os.environ.items() if not key.startswith("ATTNSERVE_")}
        status = run_to_the_end(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL))
        if status == 2:
            raise Reported(f"attnserve pull {source} refused")
        if status != 0 or not is_bundle(target):
            raise Refused(f"the export step for {source} failed (attnserve pull, exit status {status})")
    return pull


def run_to_the_end(child: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> int:
    """The child's exit status. Whatever stops the wait (the server's SIGTERM handler raising, ^C) stops the child
    too: SIGTERM, which `attnserve pull` turns into removing its staged bundle, then SIGKILL past `grace_s`; the
    child is waited for, so no export runs on after the server is gone."""
    try:
        return child.wait()
    except BaseException:
        child.terminate()
        try:
            child.wait(grace_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        raise
