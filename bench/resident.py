"""What a served bundle keeps resident: `python -m bench.resident BUNDLE [--texts 4] [--tree DIR] [--naive]`.

Starts `attnserve serve` on the bundle (from `--tree`, a checkout of this repository, to compare two versions of the
code; `--naive`: the bench's naive server, bench/naive_server.py, on the same graphs), and reads the server's
resident set from /proc/PID/status, anonymous and file-backed apart, at three points: ready (after the load and,
attnserve's, the warm-up), after one /embed of `--texts` texts of about 60 tokens, and after one /attention request
(the attention graph reads every weight). File-backed pages are the mapped weights (bundle.weights); anonymous ones
are the sessions' own memory (pre-packed MatMul weights, arenas) and Python's.
Prints one line per point, then the figures as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx

from bench import procs
from bench.large_export import process_memory

FIELDS = ("VmRSS", "RssAnon", "RssFile")


def resident(pid: int) -> dict[str, int]:
    """The process's resident set, MB, by /proc/PID/status field."""
    memory = process_memory(pid)
    return {field: memory[field] // 1024 for field in FIELDS}


def measure(bundle: Path, tree: Path, texts: int, naive: bool = False) -> dict[str, dict[str, int]]:
    name, argv = ("naive", procs.naive_argv(bundle.resolve(), "fp32")) if naive else (
        "attnserve", procs.service_argv(bundle.resolve()))
    server = procs.launch(name, argv, Path(f"/tmp/{name}-resident.log"),
                          procs.clean_env(ATTNSERVE_CACHE_BYTES="0", PYTHONPATH=str(tree)), cwd=tree)
    try:
        if not procs.wait_ready(server, 900):
            raise SystemExit(f"the server did not become ready:\n{server.log()}")
        points = {"ready": resident(server.proc.pid)}
        text = " ".join(["word"] * 60)
        answer = httpx.post(server.url + "/embed", json={"inputs": [text] * texts}, timeout=900)
        answer.raise_for_status()
        points["after /embed"] = resident(server.proc.pid)
        answer = httpx.post(server.url + "/attention", json={"inputs": "a short text"}, timeout=900)
        if answer.status_code == 200:  # a bundle without an attention graph answers 4xx: no third point
            points["after /attention"] = resident(server.proc.pid)
        return points
    finally:
        procs.terminate(server)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.resident", description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--texts", type=int, default=4, help="texts in the /embed request (default 4)")
    parser.add_argument("--tree", type=Path, default=procs.ROOT, help="the checkout to serve from (default: this one)")
    parser.add_argument("--naive", action="store_true",
                        help="measure the bench's naive server (fp32 graphs, no warm-up) instead of attnserve")
    args = parser.parse_args(argv)
    points = measure(args.bundle, args.tree.resolve(), args.texts, args.naive)
    for name, values in points.items():
        print(f"{name:<17} {values['VmRSS']:>6} MB ({values['RssAnon']} anonymous + {values['RssFile']} file-backed)")
    print(json.dumps({"bundle": str(args.bundle), "tree": str(args.tree), "naive": args.naive, "points": points}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
