"""The hub, through huggingface_hub: a revision to its commit and the files it holds, files downloaded into a
directory, and each of the hub's refusals as one line. The endpoint (HF_ENDPOINT, for a mirror), the token
(HF_TOKEN), offline mode (HF_HUB_OFFLINE) and resuming a cut download (a Range request) are huggingface_hub's own.

Progress: on a terminal, huggingface_hub's bars; elsewhere (a log collector, a pipe) no bars, and a log line per file.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
from huggingface_hub import HfApi, constants, hf_hub_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import disable_progress_bars

from hub.errors import Refused, Unreachable, disk_refusal
from hub.names import COMMIT

log = logging.getLogger(__name__)
logging.getLogger("httpx2").setLevel(logging.WARNING)  # huggingface_hub's client: a line per request at INFO
logging.getLogger("huggingface_hub").handlers.clear()  # a handler of its own besides ours: each line twice, unformatted


@dataclass(frozen=True)
class Snapshot:
    """A repository at one commit, and the files it holds there."""

    repo: str
    commit: str
    files: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.repo}@{self.commit}"


def snapshot(repo: str, revision: str) -> Snapshot:
    """The commit `revision` (a branch, a tag or a commit) of `repo` is at now, and its files."""
    with refusals(repo, revision):
        info = HfApi().model_info(repo, revision=revision)
    if info.sha is None or not COMMIT.match(info.sha):
        raise Refused(f"the hub at {constants.ENDPOINT} names no commit for {repo}@{revision} ({info.sha!r})")
    return Snapshot(repo, info.sha, tuple(sibling.rfilename for sibling in info.siblings or ()))


def download(snapshot: Snapshot, files: Iterable[str], directory: Path) -> None:
    """`files` of `snapshot` into `directory`, each as huggingface_hub keeps a local directory (a file already there
    from this commit is not fetched again)."""
    bars = sys.stderr.isatty()
    if not bars:
        disable_progress_bars()
    for name in files:
        if not bars:
            log.info("downloading %s of %s", name, snapshot)
        with refusals(snapshot.repo, snapshot.commit, directory), warnings.catch_warnings():
            # its estimate of a full disk, as raw warning lines (no log format); a full disk is refused in one line
            warnings.filterwarnings("ignore", "Not enough free disk space", UserWarning)
            hf_hub_download(snapshot.repo, name, revision=snapshot.commit, local_dir=directory)


@contextmanager
def refusals(repo: str, revision: str, directory: Path | None = None) -> Iterator[None]:
    """huggingface_hub's errors as one line each (Unreachable: the hub cannot, or may not, be asked); an OSError
    writing into `directory` as disk_refusal says it."""
    try:
        yield
    except GatedRepoError:
        raise Refused(f"{repo} is gated: accept its conditions on the hub, then set HF_TOKEN to a token of that "
                      "account") from None
    except RepositoryNotFoundError:
        raise Refused(f"no model repository {repo} on {constants.ENDPOINT} (a private one needs HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise Refused(f"{repo} has no revision {revision}") from None
    except (LocalEntryNotFoundError, OfflineModeIsEnabled, httpx2.TransportError) as err:
        raise Unreachable(unreachable(err)) from None
    except RemoteEntryNotFoundError as err:
        raise Refused(f"{repo}@{revision} has no file {err.response.url.path.rpartition('/')[2]}") from None
    except HfHubHTTPError as err:
        raise Refused(f"the hub at {constants.ENDPOINT} answered {err.response.status_code} for {repo}@{revision}"
                      ) from None
    except OSError as err:
        if directory is None:
            raise
        raise disk_refusal(err, directory) from None


def unreachable(err: Exception) -> str:
    if constants.is_offline_mode():
        return "the hub may not be asked (HF_HUB_OFFLINE is set)"
    cause = err.__cause__ or err
    return f"cannot reach the hub at {constants.ENDPOINT} ({(str(cause) or type(cause).__name__).splitlines()[0]})"
