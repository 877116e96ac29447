"""`attnserve pull NAME[@REVISION]`: a named model's bundle, made without serving it (an image build, an init
container, CI), into the bundle cache (hub.cache) or at --out; also the export step `attnserve serve --model` runs in
a subprocess for a checkpoint its cache does not hold.

A repository that holds an attnserve bundle is downloaded and verified (hub.fetch) with no torch; a checkpoint is
downloaded and exported by export/pull.py (torch), which this install must have. Every refusal is one line on
stderr and exit status 2. SIGTERM (a server stopped during its first start, a pod deleted) ends it as an exception
would: what it staged is removed, nothing is left that serves, and the exit status is 143.
"""

from __future__ import annotations

import argparse
import errno
import logging
import signal
import sys
from pathlib import Path

from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from attnserve.flags import ENV_PREFIX, add_flags, given, report
from hub.cache import making
from hub.errors import Refused, disk_refusal
from hub.models import Source, prepare
from hub.names import ModelName
from hub.options import HubOptions, Wanted

FLAGS = ("cache_dir", "variants", "reranker")
EPILOG = """examples:
  attnserve pull BAAI/bge-small-en-v1.5                    # into the cache: attnserve serve --model finds it there
  attnserve pull BAAI/bge-small-en-v1.5@main --out bundles/bge   # a bundle directory for attnserve serve --bundle
  attnserve pull Qwen/Qwen3-Reranker-0.6B --reranker qwen3 --variants fp32
  HF_HUB_OFFLINE=1 attnserve pull BAAI/bge-small-en-v1.5   # only what the cache already holds"""


class PullSettings(HubOptions, BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="Download a model by name (a hub repository id or a local directory, at a branch, tag "
        "or commit) and prepare its bundle without serving it: into the bundle cache, where attnserve serve --model "
        "finds it, or at --out. A repository that holds a bundle is verified and kept as it is; a checkpoint is "
        "exported (attnserve export's gates). HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE are honoured.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", metavar="NAME[@REVISION]", help="hub repository id (namespace/name) or local directory")
    p.add_argument("--out", type=Path, metavar="DIR", help="bundle directory to write (replaced atomically) instead "
                   "of the cache")
    add_flags(p, PullSettings, FLAGS)
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors and the bundle's path")
    return p


def main(argv: list[str] | None = None, prog: str = "attnserve pull") -> int:
    args = parser(prog).parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format=f"{prog}: %(message)s")  # quiet onnxscript/onnxruntime tools
    for own in ("hub", "export"):
        logging.getLogger(own).setLevel(logging.WARNING if args.quiet else logging.INFO)
    try:
        options = PullSettings(**given(args, FLAGS))  # type: ignore[arg-type]
    except ValidationError as error:
        return report(prog, error)
    signal.signal(signal.SIGTERM, _stop)
    try:
        print(pull(args.name, options, args.out))
    except Stopped as stop:
        print(f"{prog}: stopped by {stop} before the bundle was ready; nothing of it was kept", file=sys.stderr)
        return 128 + signal.SIGTERM
    except failures() as error:
        print(f"{prog}: {refusal(error, args.out or options.cache().root)}", file=sys.stderr)
        return 2
    return 0


class Stopped(BaseException):
    """SIGTERM reached the pull. A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way
    (the exporter's, a library's) takes it for a failure to work around; every `finally` runs, so the staged
    bundle directory is removed (bundle.files.staged_directory)."""


def _stop(signum: int, frame: object) -> None:
    raise Stopped(signal.Signals(signum).name)


def pull(text: str, options: HubOptions, out: Path | None) -> Path:
    """The bundle of the model named `text`, made in this process where it must be made."""
    name = ModelName.parse(text)
    if name.alias is not None:
        raise Refused(f"{text!r}: attnserve pull takes NAME[@REVISION]; a name to serve under is given to serve")
    options.check_rerankers([name.served_name])
    return prepare(options.wanted(name, 1), options.cache(), export_step if out is not None else cached_step, out)


def export_step(source: Source, wanted: Wanted, target: Path) -> None:
    """export/pull.py's export, imported only when a checkpoint is to be exported (torch)."""
    from export.pull import export_source

    export_source(source, wanted, target)


def cached_step(source: Source, wanted: Wanted, target: Path) -> None:
    """The export into the cache, under its place's lock (hub.cache.making): a pull that waited for another process
    making the same bundle (a server's first start, a pod beside it on one volume) finds it made and exports nothing.
    Taken here, in the process that exports, never in a server whose export runs as this command."""
    with making(target) as needed:
        if needed:
            export_step(source, wanted, target)


def failures() -> tuple[type[BaseException], ...]:
    """What a pull reports in one line: a refusal, a value or a file (a BundleError is a ValueError, an AssetMissing
    an OSError) and, once the export ran, its own errors (export.errors)."""
    if "export.bundle" not in sys.modules:
        return (Refused, ValueError, OSError)
    from export.errors import export_errors

    return (Refused, *export_errors())


def refusal(error: BaseException, where: Path) -> str:
    """The one line a failure is reported as: its message's first line, or for a full disk met while writing the
    bundle at `where` (the export writes no file name into its error), the device that holds it."""
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return str(disk_refusal(error, where))
    return str(error).splitlines()[0] if str(error) else type(error).__name__
