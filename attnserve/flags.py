"""Command-line flags from typed options: one flag per pydantic field, with its description as the help and
its ATTNSERVE_* variable named, so `attnserve serve`, `attnserve pull` and `attnserve embed` spell and document each
knob the same way; the one way a list option's items are read (comma-separated, from a variable or repeated flags);
and the one way a CLI reports options that fail validation.
"""

from __future__ import annotations

import argparse
import sys
import typing
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ValidationError

ENV_PREFIX = "ATTNSERVE_"


def add_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, options: type[BaseModel],
    names: Iterable[str] | None = None, help_for: Mapping[str, str] | None = None,
) -> None:
    """--flag-name for each field of `options` (or of `names`, in that order); bools take --no-flag-name, lists
    repeat. Every default is None, so only the flags given reach the options (the environment fills the rest)."""
    for name in names or options.model_fields:
        field = options.model_fields[name]
        text = (help_for or {}).get(name, field.description or "").replace("%", "%%")  # argparse formats with %
        help_ = f"{text} [env {ENV_PREFIX}{name.upper()}]"
        flag = "--" + name.replace("_", "-")
        if field.annotation is bool:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_)
        elif typing.get_origin(field.annotation) is list:  # repeatable; each value may hold comma-separated items
            parser.add_argument(flag, dest=name, action="append", default=None, metavar=name.upper(), help=help_)
        else:
            parser.add_argument(flag, dest=name, default=None, metavar=name.upper(), help=help_)


def given(args: argparse.Namespace, names: Iterable[str]) -> dict[str, object]:
    """The flags among `names` that were given on the command line."""
    return {name: value for name in names if (value := getattr(args, name, None)) is not None}


def split_items(value: object) -> list[object]:
    """The items of a value or list of values, strings split at commas (the environment's form, and what each
    repeated flag may hold); other items pass as they are, to the field's own validation."""
    items: list[object] = []
    for value_ in value if isinstance(value, list) else [value]:
        if isinstance(value_, str):
            items += [item.strip() for item in value_.split(",") if item.strip()]
        else:
            items.append(value_)
    return items


def report(prog: str, error: ValidationError) -> int:
    """Each invalid option as `prog: --flag (ATTNSERVE_FLAG): why` on stderr (`prog: why` for what several options
    break together); the exit status 2."""
    for err in error.errors():
        name = ".".join(str(p) for p in err["loc"])
        where = f"--{name.replace('_', '-')} ({ENV_PREFIX}{name.upper()}): " if name else ""
        print(f"{prog}: {where}{err['msg'].removeprefix('Value error, ')}", file=sys.stderr)
    return 2
