"""Session settings and graphs side by side: `python -m bench.sessions BUNDLE [--peer NAME=MODEL.onnx ...]`.

What makes a peer's batch faster than the bundle's on the same cores: its graph, or its session's settings? Each
setting below opens the bundle's fast graph (of `--variant`), and each `--peer` graph (a file that takes
input_ids, attention_mask and maybe token_type_ids and returns last_hidden_state, as transformers' ONNX export
does), in a session of its own, all with the same intra-op threads. Then rounds of runs, each session in turn
within a round, so a busy second moves every figure alike, each run after a short pause (`--pause-ms`: a lone
caller's requests do not come back to back); per shape, each session's median wall and CPU ms per batch over the
rounds, with the lowest and highest round.

| setting | what it changes from the served session (bundle.session.session_options) |
|---|---|
| served | nothing: intra-op threads spin between a run's operators and stop at its end, no memory pattern |
| sleep | intra-op threads never spin: they sleep between operators (`session.intra_op.allow_spinning` 0) |
| spin | they keep spinning after a run too (`session.force_spinning_stop` 0) |
| pattern | onnxruntime's memory pattern on (a plan of the run's buffers, kept per input shape) |
| defaults | onnxruntime's own SessionOptions: spinning and memory pattern on, every optimisation level |

Exactness comes first: every graph's mean-pooled, L2-normalised vector of 8 texts of mixed lengths in one padded
batch against the bundle's fp32 graph's (max abs), so a faster graph that attends over padding or approximates
GELU shows as a difference far above float32 rounding (about 1e-7 here).

A benchmark that prints, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.graphs import feeds, sizes
from bundle.manifest import Manifest
from bundle.session import open_session, session_options

REST_S = 0.2
SETTINGS = ("served", "sleep", "spin", "pattern", "defaults")


def options_for(setting: str, threads: int) -> Any:
    import onnxruntime as ort

    if setting == "defaults":
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        return options
    options = session_options(threads, spinning=setting == "spin")
    if setting == "sleep":
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_mem_pattern = setting == "pattern"
    return options


def open_with(path: Path, setting: str, threads: int) -> Any:
    import onnxruntime as ort

    if setting == "served":
        return open_session(path, "cpu", threads)
    return ort.InferenceSession(str(path), sess_options=options_for(setting, threads),
                                providers=["CPUExecutionProvider"])


def pooled(session: Any, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """(B, D) mean over attended tokens of the graph's token vectors, L2-normalised."""
    names = [o.name for o in session.get_outputs()]
    name = "last_hidden_state" if "last_hidden_state" in names else "token_embeddings"
    wanted = {i.name for i in session.get_inputs()}
    tokens = session.run([name], {k: v for k, v in inputs.items() if k in wanted})[0].astype(np.float64)  # (B, T, D)
    mask = inputs["attention_mask"][..., None].astype(np.float64)  # (B, T, 1)
    vectors = (tokens * mask).sum(1) / mask.sum(1)  # (B, D)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def mixed_batch(vocab: int) -> dict[str, np.ndarray]:
    """8 texts of 5 to 120 tokens, padded to the longest (ids 1000+; padding id 0)."""
    lengths = [5, 17, 33, 64, 90, 120, 7, 48]
    rng = np.random.default_rng(1)
    ids = np.zeros((len(lengths), max(lengths)), np.int64)  # (B, T)
    mask = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(1000, vocab, n)
        mask[row, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def timed(run: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(sessions: dict[str, Any], inputs: dict[str, np.ndarray], rounds: int, runs: int,
            pause_s: float) -> dict[str, list]:
    """Per session, each round's median (wall, CPU) seconds of `runs` runs, each after `pause_s` idle (as between
    one caller's requests); sessions in turn within a round, REST_S apart, so that threads left spinning by one
    session's last run (the "spin" setting) have stopped before the next session runs."""
    feeds_of = {name: {k: v for k, v in inputs.items() if k in {i.name for i in s.get_inputs()}}
                for name, s in sessions.items()}
    for name, session in sessions.items():  # warm-up: the first run of a shape plans its buffers
        session.run(None, feeds_of[name])
    got: dict[str, list] = {name: [] for name in sessions}
    for _ in range(rounds):
        for name, session in sessions.items():
            time.sleep(REST_S)
            times = []
            for _ in range(runs):
                time.sleep(pause_s)
                times.append(timed(lambda: session.run(None, feeds_of[name])))  # noqa: B023
            got[name].append((statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)))
    return got


def spread(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:8.2f} ({min(values) * 1e3:.2f}-{max(values) * 1e3:.2f})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sessions", description=__doc__.splitlines()[0])
    p.add_argument("bundle", type=Path)
    p.add_argument("--variant", default="fp32-opt", help="the bundle's fast graph of this variant (fp32-opt)")
    p.add_argument("--peer", action="append", default=[], metavar="NAME=PATH",
                   help="another graph of the same model (transformers' ONNX export: last_hidden_state)")
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {', '.join(SETTINGS)}")
    p.add_argument("--peer-settings", default="served,defaults", help="the settings each peer graph is opened with")
    p.add_argument("--shapes", default="32x128,1x16", help="BxT, comma-separated (32x128,1x16)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=3, help="runs per session per round (their median is the round's)")
    p.add_argument("--pause-ms", type=float, default=2.0, help="idle time before each run (2; 0: back to back)")
    args = p.parse_args(argv)
    manifest = Manifest.read(args.bundle)
    fast = next(g for g in manifest.graphs if g.kind == "fast" and g.variant == args.variant)
    reference = next(g for g in manifest.graphs if g.kind == "fast" and g.variant == "fp32")
    graphs = {f"bundle {args.variant}": (args.bundle / fast.file, args.settings.split(","))}
    for peer in args.peer:
        name, _, path = peer.partition("=")
        graphs[name] = (Path(path), args.peer_settings.split(","))
    sessions = {f"{graph} / {setting}": open_with(path, setting, args.threads)
                for graph, (path, settings) in graphs.items() for setting in settings}
    vocab = manifest.model_config_["vocab_size"]
    batch = mixed_batch(vocab)
    want = pooled(open_session(args.bundle / reference.file, "cpu", args.threads), batch)
    print("exactness: 8 texts of 5-120 tokens in one padded batch, mean-pooled, against the bundle's fp32 graph")
    for name, session in sessions.items():
        print(f"  {name:40s} max abs {float(np.abs(pooled(session, batch) - want).max()):.2e}")
    for shape in args.shapes.split(","):
        b, t = sizes(shape.replace("x", ","))
        got = measure(sessions, feeds(b, t, vocab, types=True), args.rounds, args.runs, args.pause_ms / 1000)
        print(f"\n{b} x {t}, {args.threads} threads: median ms per batch over {args.rounds} rounds (lowest-highest)")
        print(f"  {'session':40s} {'wall':>22s} {'CPU':>22s}")
        for name, rounds in got.items():
            print(f"  {name:40s} {spread([r[0] for r in rounds]):>22s} {spread([r[1] for r in rounds]):>22s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
