"""Mixed-adapter batches against one batch per adapter: `python -m bench.adapter_batches [--adapters 5]`.

The question docs/performance.md answers with it: requests of different tasks (adapters) may share a batch, each
row gathering its own adapter inside the graph, or the batcher could keep one batch per adapter. Same model and
graphs as `python -m bench.adapters` (a random BERT-base-shaped model, N rank-R PEFT adapters on every attention
and MLP projection, the fast fp32 graph with and without them), one onnxruntime session per graph opened as the
service opens it (bundle.session), 2 intra-op threads. The workload is B rows of T tokens, row i asking for adapter
i mod (N + 1) (0: the base). Timed, each the median of --repeats runs after a warm-up:

    base graph     the B rows through the graph without adapters (what the same batch costs a bundle with none)
    all base       the B rows, every index 0, through the adapted graph (the adapters' fixed cost)
    one adapter    the B rows, every index 1
    mixed          the B rows with their own indices, one run
    per adapter    the same rows grouped by adapter, one run per group, one after another

Prints one JSON object (milliseconds, and mixed / per adapter). Work directory removed unless --keep.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.procs import ROOT


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.adapter_batches", description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapters", type=int, default=5, help="how many adapters (default 5)")
    parser.add_argument("--rank", type=int, default=16, help="each adapter's rank (default 16)")
    parser.add_argument("--layers", type=int, default=12, help="layers (default 12)")
    parser.add_argument("--batch", type=int, default=32, help="rows in the workload (default 32)")
    parser.add_argument("--tokens", type=int, default=128, help="tokens per row (default 128)")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per case (default 7)")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads (default 2)")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "bench-adapter-batches", help="work directory")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (and reuse its graphs)")
    return parser.parse_args(argv)


def _build(args: argparse.Namespace) -> None:
    """The source model, its adapters and both graphs, through bench.adapters' own phases (torch stays there)."""
    common = ["--adapters", str(args.adapters), "--rank", str(args.rank), "--layers", str(args.layers),
              "--work", str(args.work)]
    for phase in ("source", "graphs"):
        subprocess.run([sys.executable, "-m", "bench.adapters", "--phase", phase, *common], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)


def _median_ms(run: Any, repeats: int) -> float:
    run()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 2)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from bundle.feeds import input_names, pad
    from bundle.session import open_session

    base = open_session(args.work / "base.onnx", "cpu", args.threads)
    adapted = open_session(args.work / "adapted.onnx", "cpu", args.threads)
    base_names, adapted_names = input_names(base), input_names(adapted)
    rows = [list(range(5 + i, 5 + i + args.tokens)) for i in range(args.batch)]  # (B, T), distinct rows
    indices = [i % (args.adapters + 1) for i in range(args.batch)]
    groups = {a: [row for row, i in zip(rows, indices, strict=True) if i == a] for a in sorted(set(indices))}

    def run(session: Any, names: list[str], batch: list[list[int]], adapters: list[int] | None) -> Any:
        feeds = pad(batch, 0, names, adapters=adapters)
        return lambda: session.run(None, feeds)

    per_adapter = [run(adapted, adapted_names, group, [a] * len(group)) for a, group in groups.items()]
    report = {
        "batch": args.batch, "tokens": args.tokens, "adapters": args.adapters, "rank": args.rank,
        "layers": args.layers, "threads": args.threads,
        "base_graph_ms": _median_ms(run(base, base_names, rows, None), args.repeats),
        "all_base_ms": _median_ms(run(adapted, adapted_names, rows, [0] * args.batch), args.repeats),
        "one_adapter_ms": _median_ms(run(adapted, adapted_names, rows, [1] * args.batch), args.repeats),
        "mixed_ms": _median_ms(run(adapted, adapted_names, rows, indices), args.repeats),
        "per_adapter_ms": _median_ms(lambda: [r() for r in per_adapter], args.repeats),
    }
    report["mixed_over_per_adapter"] = round(report["mixed_ms"] / report["per_adapter_ms"], 3)
    report["all_base_over_base_graph"] = round(report["all_base_ms"] / report["base_graph_ms"], 3)
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    reuse = args.keep and (args.work / "adapted.onnx").is_file()
    if not reuse:
        shutil.rmtree(args.work, ignore_errors=True)
        args.work.mkdir(parents=True)
    try:
        if not reuse:
            _build(args)
        report = measure(args)
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
