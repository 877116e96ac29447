"""python -m bench.sidebyside --bundle B SERVER [SERVER ...]: servers side by side, two versions of the code or two
settings of one, on the bench's load scenarios.

A SERVER is a source tree (a checkout of this repository: `.`, `git worktree add`, or `git archive REV | tar -x -C
DIR`), optionally followed by settings for its environment: `.,ATTNSERVE_GRAPH_RUNS=2,ATTNSERVE_INTRA_OP_THREADS=1`;
or `naive[:VARIANT]`, the bench's naive server (bench.naive_server, the fp32-opt graph unless named) from this tree.
One `attnserve serve` per SERVER (or the naive server), all on the same bundle and running at once with the answer
cache off (the scenarios repeat their bodies), then short bursts of each scenario on each server in turn, round
after round, so each one's figures are taken seconds from the others' and a busy machine moves them alike. Prints
each burst and the medians: texts/s, p50 and the server process's CPU ms per text (which other jobs on a shared
machine move far less than wall time).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from bench import procs
from bench.httpload import LoadResult, run_load
from bench.scenarios import SCENARIOS, path_of, payloads
from bench.texts import load_tokenizer
from bundle.manifest import Manifest

LOAD_SCENARIOS = ("a", "b", "c", "d")  # embeddings of plain texts


@dataclass(frozen=True)
class Spec:
    label: str
    tree: Path
    env: dict[str, str]


NAIVE = "naive"  # a SERVER that is the naive server


def parse_spec(text: str) -> Spec:
    """`TREE[,VAR=VALUE...]`: a checkout and the environment its server starts with (or `naive[:VARIANT]`)."""
    if text.partition(":")[0] == NAIVE:
        return Spec(text, Path("."), {})
    tree, *settings = text.split(",")
    env = {}
    for setting in settings:
        name, sep, value = setting.partition("=")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"{setting!r} in {text!r} is not VAR=VALUE")
        env[name] = value
    return Spec(text, Path(tree), env)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.sidebyside", description=__doc__.splitlines()[0])
    parser.add_argument("servers", nargs="+", type=parse_spec, metavar="TREE[,VAR=VALUE...]",
                        help="a source tree (repository checkout) to serve from, and settings for its environment; "
                        "or naive[:VARIANT], the naive server")
    parser.add_argument("--bundle", type=Path, required=True, help="the bundle every server serves")
    parser.add_argument("--scenarios", default="a,d",
                        help=f"comma-separated bench scenarios among {','.join(LOAD_SCENARIOS)} (bench.scenarios)")
    parser.add_argument("--rounds", type=int, default=3, help="bursts per server and scenario")
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per burst (after 1 s of warm-up)")
    args = parser.parse_args(argv)
    args.scenarios = args.scenarios.split(",")
    if unknown := [s for s in args.scenarios if s not in LOAD_SCENARIOS]:
        parser.error(f"unknown scenarios {unknown}: choose among {', '.join(LOAD_SCENARIOS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bundle = args.bundle.resolve()
    manifest = Manifest.read(bundle)
    tokenizer = load_tokenizer(bundle, manifest)
    log_dir = Path(tempfile.mkdtemp(prefix="attnserve-sidebyside-"))
    servers = []
    try:
        for i, spec in enumerate(args.servers):
            env = procs.clean_env(ATTNSERVE_CACHE_BYTES="0", **spec.env)
            naive, _, variant = spec.label.partition(":")
            argv = (procs.naive_argv(bundle, variant or "fp32-opt") if naive == NAIVE
                    else procs.service_argv(bundle))
            server = procs.launch(spec.label, argv, log_dir / f"server-{i}.log", env, cwd=spec.tree.resolve())
            servers.append(server)
            if not procs.wait_ready(server):
                sys.exit(f"{spec.label}: server not ready; see {server.log_path}")
        figures: dict[tuple[int, str], list[tuple[float, float, float]]] = {}
        for round_ in range(args.rounds):
            for name in args.scenarios:
                for i, server in enumerate(servers):
                    row = _burst(server, name, tokenizer, args.duration, manifest.max_length)
                    figures.setdefault((i, name), []).append(row)
                    print(f"round {round_ + 1} ({name}) {args.servers[i].label}: {row[0]:.1f} texts/s, "
                          f"p50 {row[1]:.2f} ms, {row[2]:.3f} CPU ms per text", flush=True)
        print("\n| server | scen. | texts/s | p50 ms | CPU ms per text |\n|---|---|---|---|---|")
        for name in args.scenarios:
            for i, spec in enumerate(args.servers):
                rows = figures[i, name]
                medians = [statistics.median(row[k] for row in rows) for k in range(3)]
                print(f"| {spec.label} | {name} | {medians[0]:.1f} | {medians[1]:.2f} | {medians[2]:.3f} |")
    finally:
        for server in servers:
            procs.terminate(server)
    return 0


def _burst(server: procs.Server, name: str, tokenizer: Tokenizer, duration: float,
           max_length: int) -> tuple[float, float, float]:
    """(texts/s, p50 ms, server CPU ms per text) of one burst of scenario `name`."""
    scenario = SCENARIOS[name]
    bodies, path = payloads(scenario, tokenizer, "embed", max_length=max_length), path_of(scenario, "embed")
    asyncio.run(run_load(server.port, path, bodies, scenario.workers, 1.0))
    result: LoadResult = asyncio.run(run_load(server.port, path, bodies, scenario.workers, duration,
                                              lambda: procs.tree_cpu_s(server.proc.pid)))
    if result.errors or not result.requests:
        raise SystemExit(f"{server.name}: {result.errors} errors ({result.statuses}); see {server.log_path}")
    assert result.server_cpu_s is not None
    latencies = sorted(result.latencies_s)
    return (result.texts / result.wall_s, 1000 * latencies[len(latencies) // 2],
            1000 * result.server_cpu_s / result.texts)


if __name__ == "__main__":
    sys.exit(main())
