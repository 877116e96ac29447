"""Starts Infinity's command line, with a fixed number of onnxruntime intra-op threads or with its defaults.

Run by the Python of Infinity's own virtual environment (bench.infinity), never by the project's:
`python -I bench/infinity_launch.py THREADS v2 --model-id ...` (-I: the script's folder is not put on
sys.path, so bench's modules cannot shadow Infinity's imports).

Infinity passes no session options to onnxruntime, which then takes one thread per physical core and
spins between runs. On the bundle's graph the bench gives every server the same thread budget, so THREADS
sets intra_op_num_threads on whatever options optimum hands to InferenceSession, and nothing else: the rest
of Infinity's behaviour (its batching, queue, spinning) is its own. THREADS 0 leaves the options alone:
what a user who runs Infinity gets.
"""

from __future__ import annotations

import sys
from typing import Any


def pin_threads(threads: int) -> None:
    import onnxruntime as ort

    opened = ort.InferenceSession.__init__

    def init(self: Any, path_or_bytes: Any, sess_options: Any = None, *args: Any, **kwargs: Any) -> None:
        options = sess_options or ort.SessionOptions()
        options.intra_op_num_threads = threads
        opened(self, path_or_bytes, options, *args, **kwargs)

    ort.InferenceSession.__init__ = init  # type: ignore[method-assign]


def main() -> None:
    threads, argv = int(sys.argv[1]), sys.argv[2:]
    if threads:
        pin_threads(threads)
    from infinity_emb.cli import cli

    sys.argv = ["infinity_emb", *argv]
    cli()


if __name__ == "__main__":
    main()
