"""Load scenarios for the other heads: `python -m bench.heads --rerank-bundle DIR --sparse-bundle DIR`.

  rerank  1 caller x 1 query and 32 documents of ~128 tokens on TEI's /rerank (pairs of ~140 tokens in one
          dynamic batch), and the same with chunking=max (each document one window here);
  sparse  4 callers x 32 texts of ~128 tokens on /embed_sparse (SPLADE: a vocabulary-wide vector each).

Each bundle is served by `attnserve serve` (the Dockerfile's command) on loopback; a scenario's first
request is checked, then closed-loop callers run for --duration seconds. Prints a Markdown table (texts
are documents for rerank) and appends one JSON line per scenario to --out, as `python -m bench` does.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

from bench import procs, report
from bench.httpload import Payload, run_load
from bench.texts import load_tokenizer, make_texts, token_counts


@dataclass(frozen=True)
class HeadScenario:
    name: str
    route: str
    workers: int
    texts: int  # documents (rerank) or inputs (sparse) per request
    length: int
    extra: tuple[tuple[str, object], ...] = ()


SCENARIOS = {
    "rerank": HeadScenario("rerank", "/rerank", 1, 32, 128),
    "rerank-max": HeadScenario("rerank-max", "/rerank", 1, 32, 128, (("chunking", "max"),)),
    "sparse": HeadScenario("sparse", "/embed_sparse", 4, 32, 128),
}


def payloads(scenario: HeadScenario, bundle: Path, pool: int = 16) -> list[Payload]:
    tokenizer = load_tokenizer(bundle)
    out = []
    for i in range(pool):
        texts = make_texts(tokenizer, scenario.length, scenario.texts, seed=7000 + i)
        body: dict[str, object] = {"inputs": texts}
        if scenario.route == "/rerank":
            body = {"query": make_texts(tokenizer, 12, 1, seed=9000 + i)[0], "texts": texts}
        tokens = sum(token_counts(tokenizer, texts))
        out.append(Payload(orjson.dumps({**body, **dict(scenario.extra)}), len(texts), tokens))
    return out


def measure(bundle: Path, names: list[str], duration_s: float, rec: report.Recorder, log_dir: Path) -> None:
    server = procs.start(f"heads-{bundle.name}", procs.service_argv(bundle), {}, log_dir)
    try:
        for name in names:
            scenario = SCENARIOS[name]
            bodies = payloads(scenario, bundle)
            check = httpx.post(server.url + scenario.route, content=bodies[0].body,
                               headers={"content-type": "application/json"}, timeout=120.0)
            result = asyncio.run(run_load(server.port, scenario.route, bodies, scenario.workers, duration_s,
                                          lambda: procs.tree_cpu_s(server.proc.pid)))
            row = rec.add("heads", scenario=name, route=scenario.route, workers=scenario.workers,
                          texts=scenario.texts, length=scenario.length, check=check.status_code, **result.summary())
            print(f"| {name} | {scenario.workers}x{scenario.texts}x{scenario.length} | {row['texts_per_s']:.1f} | "
                  f"{row['p50_ms']:.1f} | {row['p95_ms']:.1f} | {row['errors']}/{row['requests']} |", flush=True)
    finally:
        procs.terminate(server)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.heads", description=__doc__.splitlines()[0])
    parser.add_argument("--rerank-bundle", type=Path, help="a one-label cross-encoder bundle")
    parser.add_argument("--sparse-bundle", type=Path, help="a masked-LM (SPLADE) bundle")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per scenario")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results.jsonl")
    args = parser.parse_args(argv)
    if args.rerank_bundle is None and args.sparse_bundle is None:
        sys.exit("give --rerank-bundle, --sparse-bundle or both")
    rec, log_dir = report.Recorder(args.out), Path(tempfile.mkdtemp(prefix="attnserve-bench-heads-"))
    print("| scenario | callers x texts x tokens | texts/s | p50 ms | p95 ms | errors |\n|---|---|---|---|---|---|")
    if args.rerank_bundle is not None:
        measure(args.rerank_bundle, ["rerank", "rerank-max"], args.duration, rec, log_dir)
    if args.sparse_bundle is not None:
        measure(args.sparse_bundle, ["sparse"], args.duration, rec, log_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
