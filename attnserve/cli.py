"""`attnserve` console script: dispatches to the train, export, pull, serve and embed subcommands.

Each subcommand is imported only when chosen, so `attnserve serve` and `attnserve embed` never import torch (nor does
`attnserve pull` of a repository that holds a bundle).
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "train": ("model.training.cli", "train (or fine-tune) an encoder and write a checkpoint directory"),
    "export": ("export.cli", "export a checkpoint or BERT directory to a verified ONNX bundle"),
    "pull": ("attnserve.pull", "download a model by name and prepare its bundle, without serving it"),
    "serve": ("service.cli", "serve bundles, or models by name (--model), over HTTP with onnxruntime"),
    "embed": ("jobs.cli", "embed a corpus (JSONL, CSV, Parquet, text) into Parquet, on one machine or Ray"),
}

USAGE = f"usage: attnserve {{{','.join(COMMANDS)}}} [options]   (attnserve COMMAND --help for details)\n\n" + "\n".join(
    f"  {name:<8} {help_}" for name, (_, help_) in COMMANDS.items()
)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"attnserve: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    return int(module.main(rest, prog=f"attnserve {command}") or 0)


if __name__ == "__main__":
    sys.exit(main())
