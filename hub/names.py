"""A model named on the command line: `[ALIAS=]NAME[@REVISION]`.

NAME is a local directory when there is one at that path (as transformers decides), else a hub repository id
(`BAAI/bge-m3`: a namespace and a name, or a name alone); REVISION a branch, a tag or a commit of it, by default
`main` (as huggingface_hub downloads). The model is served under ALIAS, else under NAME (a directory: under its own
name, the last part of its path). A `=` after a slash belongs to NAME, as in `--bundle`.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from hub.errors import Refused

REPO_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
DEFAULT_REVISION = "main"


class ModelName(BaseModel):
    """A model as named; `revision` None: the default branch."""

    model_config = ConfigDict(frozen=True)
    name: str
    revision: str | None = None
    alias: str | None = None

    @classmethod
    def parse(cls, text: str) -> ModelName:
        """`[ALIAS=]NAME[@REVISION]`; ValueError for an empty part, or a revision that would name a directory."""
        alias, equals, rest = text.partition("=")
        if not equals or "/" in alias:
            alias, equals, rest = "", "", text
        name, at, revision = rest.partition("@")
        if (equals and not alias) or not name or (at and not revision) or revision in (".", ".."):
            raise ValueError(f"model {text!r}: expected [ALIAS=]NAME[@REVISION], no part empty, no revision . or ..")
        return cls(name=name, revision=revision or None, alias=alias or None)

    @property
    def directory(self) -> Path | None:
        """The local directory NAME is, None for a hub repository."""
        path = Path(self.name).expanduser()
        return path if self.revision is None and path.is_dir() else None

    @property
    def served_name(self) -> str:
        directory = self.directory
        return self.alias or (directory.resolve().name if directory is not None else self.name)

    @property
    def pinned(self) -> bool:
        """Whether the revision is a commit: nothing to resolve, and nothing moves it."""
        return self.revision is not None and COMMIT.match(self.revision) is not None

    def checked_repo(self) -> str:
        """NAME as a hub repository id; Refused when it is neither that nor a directory here."""
        if not REPO_ID.match(self.name) or ".." in self.name:
            raise Refused(f"{self.name!r} is neither a directory here nor a hub repository id (namespace/name)")
        return self.name

    def __str__(self) -> str:
        return f"{self.name}@{self.revision}" if self.revision else self.name
