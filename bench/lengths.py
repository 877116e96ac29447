"""python -m bench.lengths: time and peak memory of one long input, the exported graph against transformers.

    python -m bench.lengths                                   # every preset of bench.longmodel, built once each
    python -m bench.lengths --models modernbert-base --lengths 512,2048 --repeats 5
    python -m bench.lengths --bundle B --lengths 512,2048     # a bundle of your own (its manifest names its source)

For each model (bench.longmodel's presets: ModernBERT-base, Qwen3-Embedding-0.6B and EmbeddingGemma-300m shapes,
each at its own lengths up to its max), each length and each side, a fresh process (bench.peak) loads the model and
runs one input at batch 1: ours is the bundle's fast fp32 graph in onnxruntime on CPU, the reference transformers'
AutoModel on the same weights (the bundle's source directory), its default attention on CPU (sdpa), up to
--reference-up-to tokens (one transformers run of Qwen3-0.6B at 32,768 tokens takes tens of minutes on two cores);
past it ours runs once, cold, timed as it comes.
The two sides alternate, length by length, so both see the same background load. Printed: a Markdown table per model
(median wall and CPU ms per input; the peak memory the input cost on top of the loaded model, and the process's whole
peak; the ratios of wall time and of the input's memory; the max abs difference of the two sides' token states) and
the 1-minute load average; one JSON line per point is appended to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench import report
from bench.longmodel import PRESETS
from bench.procs import ROOT


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.lengths", description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(PRESETS), help=f"comma-separated presets, from {', '.join(PRESETS)}")
    p.add_argument("--bundle", type=Path, help="measure this bundle instead of the presets (its manifest names its "
                   "transformers source)")
    p.add_argument("--lengths", help="comma-separated token counts (default: each preset's own; a bundle: 512,2048)")
    p.add_argument("--repeats", type=int, default=1, help="timed runs per point, after one warm-up run")
    p.add_argument("--reference-up-to", type=int, default=8192, metavar="TOKENS",
                   help="run transformers at lengths up to this many tokens (above it: ours only)")
    p.add_argument("--layers", type=int, default=0, help="cut each preset to its first N layers (0: all of them)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="intra-op threads, both sides")
    p.add_argument("--no-reference", action="store_true", help="measure the graph only")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results-lengths.jsonl",
                   help="JSON-lines file the points are appended to")
    args = p.parse_args(argv)
    unknown = set(args.models.split(",")) - set(PRESETS)
    if unknown and args.bundle is None:
        p.error(f"unknown preset(s) {', '.join(sorted(unknown))}; expected some of {', '.join(PRESETS)}")
    return args


def point(side: str, bundle: Path, tokens: int, repeats: int, threads: int, save: Path) -> dict[str, Any]:
    """One bench.peak process; its last line is the point. A process the kernel killed (out of memory) is a
    point with an error, not the end of the run."""
    command = [sys.executable, "-m", "bench.peak", side, str(bundle), str(tokens), "--repeats", str(repeats),
               "--threads", str(threads), "--save", str(save)]
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
        diff = f"{ours['max_abs_diff']:.1e}" if "max_abs_diff" in ours else "-"
        rows.append([f"{tokens:,}", *_cells(ours), *_cells(ref), _ratio(ours, ref, "wall_ms"),
                     _ratio(ours, ref, "peak_mb"), diff])
    return report.table(["tokens", "ours ms (CPU ms)", "ours peak MB (process)", "reference ms (CPU ms)",
                         "reference peak MB (process)", "time ours / ref", "memory ours / ref", "max abs diff"], rows)


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


def max_abs_diff(ours: Path, reference: Path) -> float | None:
    """The largest |ours - reference| over the two sides' saved token states; None when either is missing."""
    if not ours.is_file() or not reference.is_file():
        return None
    return float(np.abs(np.load(ours) - np.load(reference)).max())


def measure_model(name: str, bundle: Path, lengths: list[int], args: argparse.Namespace,
                  rec: report.Recorder) -> list[dict[str, Any]]:
    print(f"\n## {name}: {bundle}", flush=True)
    points = []
    with tempfile.TemporaryDirectory(prefix="bench-lengths-") as scratch:
        for tokens in lengths:
            saved = {side: Path(scratch) / f"{side}-{tokens}.npy" for side in ("ours", "reference")}
            sides = ["ours"] if args.no_reference or tokens > args.reference_up_to else ["ours", "reference"]
            repeats = args.repeats if "reference" in sides else 0  # ours alone: one cold run (minutes at 32,768)
            rows = {side: point(side, bundle, tokens, repeats, args.threads, saved[side]) for side in sides}
            diff = max_abs_diff(saved["ours"], saved["reference"])
            if diff is not None:
                rows["ours"]["max_abs_diff"] = diff
            for side, row in rows.items():
                points.append(rec.add("length", model=name, bundle=str(bundle), **row))
                print(f"  {side:9s} {tokens:6,d} tokens  " + _line(points[-1]), flush=True)
    print("\n" + table(points), flush=True)
    return points


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rec = report.Recorder(args.out)
    print(f"# bench.lengths: {report.machine()['cpu']}, {args.threads} threads, batch 1", flush=True)
    chosen = [int(n) for n in args.lengths.split(",")] if args.lengths else None
    count = 0
    if args.bundle is not None:
        count += len(measure_model(args.bundle.name, args.bundle, chosen or [512, 2048], args, rec))
    else:
        from bench.longmodel import cached_bundle

        for name in args.models.split(","):
            bundle = cached_bundle(name, args.layers)
            count += len(measure_model(name, bundle, chosen or list(PRESETS[name].lengths), args, rec))
    print(f"\nload average (1 min) {os.getloadavg()[0]:.2f}; {count} rows appended to {args.out}")
    return 0


def _line(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"FAILED {row['error']}"
    diff = f"  max abs diff {row['max_abs_diff']:.1e}" if "max_abs_diff" in row else ""
    return (f"{row['wall_ms']:9,.0f} ms wall {row['cpu_ms']:9,.0f} ms CPU  loaded {row['loaded_mb']:6,.0f} MB  "
            f"peak +{row['peak_mb']:6,.0f} MB  load {row['loadavg_1m']:.2f}{diff}")


if __name__ == "__main__":
    raise SystemExit(main())
