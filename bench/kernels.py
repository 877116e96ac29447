"""python -m bench.kernels: the attention kernels a long input could run on, one operator at a time, in onnxruntime.

    python -m bench.kernels                       # 2,048 and 8,192 tokens, then the short batches
    python -m bench.kernels --lengths 2048,16384

Each candidate is a one-node (or, for the explicit equation, six-node) graph over random q, k and v at batch 1, in a
fresh process, so its peak resident set is its own: median wall time of --repeats runs after one warm-up, and the
peak the runs cost over the opened session (VmHWM, reset after loading, as bench.peak does). ModernBERT's heads (12 of
64) for the bidirectional candidates, Qwen3-0.6B's (16 query heads over 8 key/value heads of 128) for the causal
ones. Then, at the batches the service runs short inputs in, the streamed kernel as model/attention.py exports it
(MultiHeadAttention with the padding as a 65th dimension) against the explicit equation. Why the fast graphs stream
with MultiHeadAttention and GroupQueryAttention: docs/performance.md.

    explicit       MatMul(q, kᵀ) · scale + mask -> Softmax -> MatMul(·, v), as the 512-position encoders export it
    attention-23   the standard Attention operator of opset 23, its CPU kernel
    mha            com.microsoft.MultiHeadAttention without a mask (its CPU flash path)
    mha-padding    the same with q and k one dimension wider, the padding's dimension (what the fast graph runs)
    mha-mask       the same with a key_padding_mask input instead
    mha-causal     MultiHeadAttention with unidirectional=1
    gqa            com.microsoft.GroupQueryAttention, causal (Qwen3-0.6B's heads)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import report
from bench.procs import ROOT

CANDIDATES = ("explicit", "attention-23", "mha", "mha-padding", "mha-mask", "mha-causal", "gqa")
SHORT = ((32, 128), (8, 512), (1, 2048))  # (batch, tokens) for the streamed kernel against the explicit equation


def graph(candidate: str, batch: int, tokens: int) -> tuple[bytes, dict[str, np.ndarray]]:
    """The candidate's model and random feeds."""
    from onnx import helper

    rng = np.random.default_rng(0)

    def feed(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    B, T, H, d = batch, tokens, 12, 64
    if candidate == "gqa":
        H, H_kv, d = 16, 8, 128
        feeds = {"q": feed(B, T, H * d), "k": feed(B, T, H_kv * d), "v": feed(B, T, H_kv * d),
                 "s": np.full((B,), T - 1, np.int32), "t": np.array(T, np.int32)}
        return model([helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "s", "t"], ["o", "pk", "pv"],
                                       domain="com.microsoft", num_heads=H, kv_num_heads=H_kv)], feeds), feeds
    if candidate == "explicit":
        feeds = {"q": feed(B, H, T, d), "k": feed(B, H, T, d), "v": feed(B, H, T, d),
                 "a": np.zeros((B, 1, 1, T), np.float32), "c": np.array(d ** -0.5, np.float32)}
        nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
                 helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "c"], ["s2"]),
                 helper.make_node("Add", ["s2", "a"], ["s3"]), helper.make_node("Softmax", ["s3"], ["p"], axis=-1),
                 helper.make_node("MatMul", ["p", "v"], ["o"])]
        return model(nodes, feeds), feeds
    if candidate == "attention-23":
        feeds = {"q": feed(B, H, T, d), "k": feed(B, H, T, d), "v": feed(B, H, T, d)}
        return model([helper.make_node("Attention", ["q", "k", "v"], ["o"])], feeds, opset=23), feeds
    width = d + 1 if candidate == "mha-padding" else d
    feeds = {"q": feed(B, T, H * width), "k": feed(B, T, H * width), "v": feed(B, T, H * d)}
    names = ["q", "k", "v"]
    if candidate == "mha-mask":
        feeds["m"] = np.ones((B, T), np.int32)
        names += ["", "m"]
    node = helper.make_node("MultiHeadAttention", names, ["o"], domain="com.microsoft", num_heads=H, scale=d ** -0.5,
                            unidirectional=int(candidate == "mha-causal"))
    return model([node], feeds), feeds


def model(nodes: list[Any], feeds: dict[str, np.ndarray], opset: int = 17) -> bytes:
    """A serialised model of `nodes` whose inputs are the feeds (their dtypes and shapes) and whose output is "o"."""
    from onnx import helper

    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
              for n, v in feeds.items()]
    out = [helper.make_tensor_value_info("o", 1, None)]
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(helper.make_graph(nodes, "g", inputs, out), opset_imports=opsets).SerializeToString()


def one(candidate: str, batch: int, tokens: int, repeats: int, threads: int) -> dict[str, Any]:
    """Runs in its own process (the `--one` form): the candidate's figures as a dict."""
    import onnxruntime as ort

    from bench.peak import status_kb
    from bundle.session import session_options

    model, feeds = graph(candidate, batch, tokens)
    session = ort.InferenceSession(model, session_options(threads), providers=["CPUExecutionProvider"])
    before = status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    session.run(None, feeds)
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        session.run(None, feeds)
        walls.append(time.perf_counter() - start)
    return {"candidate": candidate, "batch": batch, "tokens": tokens, "wall_ms": 1e3 * statistics.median(walls),
            "peak_mb": (status_kb("VmHWM") - before) / 1024}


def measured(candidate: str, batch: int, tokens: int, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.kernels", "--one", f"{candidate},{batch},{tokens}",
               "--repeats", str(args.repeats), "--threads", str(args.threads)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        return {"candidate": candidate, "batch": batch, "tokens": tokens, "error": done.stderr.strip()[-200:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def cell(p: dict[str, Any]) -> str:
    return "failed" if "error" in p else f"{p['wall_ms']:,.0f} ms, +{p['peak_mb']:,.0f} MB"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kernels", description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="2048,8192", help="comma-separated token counts, batch 1")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per point, after one warm-up")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="intra-op threads")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        candidate, batch, tokens = args.one.split(",")
        print(json.dumps(one(candidate, int(batch), int(tokens), args.repeats, args.threads)))
        return 0
    lengths = [int(n) for n in args.lengths.split(",")]
    print(f"# bench.kernels: {report.machine()['cpu']}, {args.threads} threads; median wall, peak over the session",
          flush=True)
    rows = [[c, *(cell(measured(c, 1, n, args)) for n in lengths)] for c in CANDIDATES]
    print(report.table(["kernel", *(f"{n:,} tokens" for n in lengths)], rows), flush=True)
    short = [[f"{b} x {n:,}", *(cell(measured(c, b, n, args)) for c in ("mha-padding", "explicit"))] for b, n in SHORT]
    print("\n" + report.table(["batch x tokens", "mha-padding", "explicit"], short))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
