"""python -m bench.sidebyside --bundle B TREE [TREE ...]: the server's CPU per request, two versions of the code
side by side.

One `attnserve serve` per source tree (each a checkout of this repository: `git worktree add`, or `git archive
REV | tar -x -C DIR`), all on the same bundle and running at once, then short load bursts on each in turn,
round after round: 32 callers with one short text each, then one caller. What is compared is the server
process's CPU time per request, which other jobs on a shared machine move far less than wall time, taken
minutes apart from nothing: a version's rounds are interleaved with the other's. Prints each round and the
medians.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

import orjson

from bench import procs
from bench.httpload import Payload, run_load

CALLERS = (32, 1)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.sidebyside", description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", type=Path, help="source trees (repository checkouts) to serve from")
    parser.add_argument("--bundle", type=Path, required=True, help="the bundle every server serves")
    parser.add_argument("--route", default="/embed", choices=("/embed", "/v1/embeddings", "/classify"),
                        help="the route the load goes to")
    parser.add_argument("--rounds", type=int, default=3, help="bursts per tree and number of callers")
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per burst (after 0.5 s of warm-up)")
    return parser.parse_args(argv)


def bodies(route: str) -> list[Payload]:
    def body(i: int) -> bytes:
        text = f"the film number {i} was fine and fun"
        return orjson.dumps({"input": text, "model": "bench"} if route == "/v1/embeddings" else {"inputs": text})

    return [Payload(body(i), 1, 10) for i in range(64)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log_dir = Path(tempfile.mkdtemp(prefix="attnserve-sidebyside-"))
    servers = []
    try:
        for i, tree in enumerate(args.trees):
            server = procs.launch(str(tree), procs.service_argv(args.bundle.resolve()), log_dir / f"server-{i}.log",
                                  procs.clean_env(), cwd=tree.resolve())
            servers.append(server)
            if not procs.wait_ready(server):
                sys.exit(f"{tree}: server not ready; see {server.log_path}")
        cpu_ms: dict[tuple[int, int], list[float]] = {(i, n): [] for i in range(len(servers)) for n in CALLERS}
        for round_ in range(args.rounds):
            for callers in CALLERS:
                for i, server in enumerate(servers):
                    cpu_ms[i, callers].append(_burst(server, args.route, callers, args.duration))
                    print(f"round {round_ + 1} {callers:2d} caller(s) {args.trees[i]}: "
                          f"{cpu_ms[i, callers][-1]:.3f} ms CPU per request", flush=True)
        print(f"\n| tree | {args.route}, 32 callers: CPU ms per request (median) | 1 caller |\n|---|---|---|")
        for i, tree in enumerate(args.trees):
            print(f"| {tree} | {statistics.median(cpu_ms[i, 32]):.3f} | {statistics.median(cpu_ms[i, 1]):.3f} |")
    finally:
        for server in servers:
            procs.terminate(server)
    return 0


def _burst(server: procs.Server, route: str, callers: int, duration: float) -> float:
    payloads = bodies(route)
    asyncio.run(run_load(server.port, route, payloads, callers, 0.5))
    result = asyncio.run(run_load(server.port, route, payloads, callers, duration,
                                  lambda: procs.tree_cpu_s(server.proc.pid)))
    if result.errors or not result.requests:
        raise SystemExit(f"{server.name}: {result.errors} errors ({result.statuses}); see {server.log_path}")
    assert result.server_cpu_s is not None
    return 1000 * result.server_cpu_s / result.requests


if __name__ == "__main__":
    sys.exit(main())
