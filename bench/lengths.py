"""python -m bench.lengths: time and peak memory of one long input, the exported graph against transformers.

    python -m bench.lengths                        # a random-weight ModernBERT-base, built and cached once
    python -m bench.lengths --bundle B --lengths 512,2048 --repeats 5

For each length (default 512, 2,048 and 8,192 tokens) and each side, a fresh process (bench.peak) loads the
model and runs one input at batch 1: ours is the bundle's fast fp32 graph in onnxruntime on CPU, the reference
transformers' ModernBertModel on the same weights (the bundle's source directory), its default attention on
CPU. The two sides alternate, length by length, so both see the same background load. Printed: a Markdown
table (median wall and CPU ms per input; the peak memory the input cost on top of the loaded model, and the
process's whole peak; the ratios of wall time and of the input's memory) and the 1-minute load average; one
JSON line per point is appended to --out. Without --bundle, bench.longmodel builds the model.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import report
from bench.procs import ROOT

LENGTHS = (512, 2048, 8192)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.lengths", description=__doc__.splitlines()[0])
    p.add_argument("--bundle", type=Path, help="a ModernBERT bundle whose manifest names its transformers source "
                   "(default: the cached random-weight ModernBERT-base, built on first use)")
    p.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="comma-separated token counts")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per point, after one warm-up run")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="intra-op threads, both sides")
    p.add_argument("--no-reference", action="store_true", help="measure the graph only")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results-lengths.jsonl",
                   help="JSON-lines file the points are appended to")
    return p.parse_args(argv)


def point(side: str, bundle: Path, tokens: int, repeats: int, threads: int) -> dict[str, Any]:
    """One bench.peak process; its last line is the point. A process the kernel killed (out of memory) is a
    point with an error, not the end of the run."""
    command = [sys.executable, "-m", "bench.peak", side, str(bundle), str(tokens), "--repeats", str(repeats),
               "--threads", str(threads)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0:
        return {"side": side, "tokens": tokens, "error": f"exit {done.returncode}: {done.stderr.strip()[-300:]}"}
    extra = json.loads(lines[0]) if len(lines) > 1 else {}
    return {**extra, **json.loads(lines[-1])}


def table(points: list[dict[str, Any]]) -> str:
    rows = []
    for tokens in sorted({p["tokens"] for p in points}):
        ours = next(p for p in points if p["tokens"] == tokens and p["side"] == "ours")
        ref = next((p for p in points if p["tokens"] == tokens and p["side"] == "reference"), {})
        rows.append([f"{tokens:,}", *_cells(ours), *_cells(ref), _ratio(ours, ref, "wall_ms"),
                     _ratio(ours, ref, "peak_mb")])
    return report.table(["tokens", "ours ms (CPU ms)", "ours peak MB (process)", "reference ms (CPU ms)",
                         "reference peak MB (process)", "time ours / ref", "memory ours / ref"], rows)


def _cells(p: dict[str, Any]) -> list[Any]:
    """ms: median wall (CPU) per input; MB: the input's peak over the loaded model (the process's whole peak)."""
    if "error" in p:
        return ["failed", "failed"]
    if not p:
        return ["-", "-"]
    return [f"{p['wall_ms']:,.0f} ({p['cpu_ms']:,.0f})", f"{p['peak_mb']:,.0f} ({p['loaded_mb'] + p['peak_mb']:,.0f})"]


def _ratio(ours: dict[str, Any], ref: dict[str, Any], key: str) -> str:
    if key not in ours or key not in ref or not ref[key]:
        return "-"
    return f"{ours[key] / ref[key]:.2f}x"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.bundle is None:
        from bench.longmodel import cached_bundle

        args.bundle = cached_bundle()
    rec = report.Recorder(args.out)
    sides = ["ours"] if args.no_reference else ["ours", "reference"]
    print(f"# bench.lengths {args.bundle}: {report.machine()['cpu']}, {args.threads} threads, batch 1", flush=True)
    points = []
    for tokens in (int(n) for n in args.lengths.split(",")):
        for side in sides:
            row = rec.add("length", bundle=str(args.bundle), **point(side, args.bundle, tokens, args.repeats,
                                                                     args.threads))
            print(f"  {side:9s} {tokens:6,d} tokens  " + _line(row), flush=True)
            points.append(row)
    print("\n" + table(points) + f"\n\nload average (1 min) {os.getloadavg()[0]:.2f}; "
          f"{len(points)} rows appended to {args.out}")
    return 0


def _line(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"FAILED {row['error']}"
    return (f"{row['wall_ms']:9,.0f} ms wall {row['cpu_ms']:9,.0f} ms CPU  loaded {row['loaded_mb']:6,.0f} MB  "
            f"peak +{row['peak_mb']:6,.0f} MB  load {row['loadavg_1m']:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
