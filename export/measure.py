"""What export measures of each fast graph besides parity: batch invariance and speed (manifest `measured`).

Shape letters: B batch, T sequence.

Batch invariance (bundle.invariance): every parity text is run alone, in its parity batch (mixed lengths)
and in one batch with the others, padded to the longest: all of them that fit TOGETHER_TOKENS, shortest first.

An image model's parity images the same way (bundle.invariance.image_max_abs_diff: images share one size, so only the
batch partners change), and its speed at IMAGE_SPEED_BATCHES images per batch.

Speed: timed only where it decides something, i.e. where a provider has two or more fast graphs for
`variant=auto` (inference.runtime.variants) to choose from; a provider with one graph gets its invariance
figure and no times. Median time per batch at SPEED_SHAPES (B x T, T cut to the model's max length), every
graph of one provider run once per round in turn (interleaved), so all of them see the same background load.
On CPU the clock is this process's CPU time, which other jobs on a shared machine disturb far less than
wall time; on CUDA it is wall time.

The timings are bounded in time whatever the model's size: a one-row probe of each graph first, and each
shape's B is cut so that one run of the slowest graph is predicted (per token, from the probe) to take at
most SPEED_SECONDS_PER_RUN (a key "6x16" says so); each shape then runs SPEED_ROUNDS rounds, more for short
batches (SPEED_SECONDS_PER_SHAPE, at most SPEED_ROUNDS_MAX). A MiniLM keeps its 32 x 128 batches (~1.3 s);
a 0.6B-parameter model is timed on rows of one to a few texts.
Sessions are opened with the service's options (bundle.session), so these are the served sessions.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bundle.feeds import INPUT_NAMES, PIXEL_VALUES, pad
from bundle.invariance import batch_max_abs_diff, image_max_abs_diff
from bundle.manifest import GraphEntry, Measured
from bundle.session import ORT_PROVIDERS, open_session

log = logging.getLogger(__name__)

# Client batches, small callers' batches of short texts, long inputs (cut to the model's max length).
SPEED_SHAPES = ((32, 128), (32, 16), (8, 512))
SPEED_ROUNDS = 5
# Short batches run more rounds, up to about this many seconds of one graph's runs per shape (at most
# SPEED_ROUNDS_MAX): a 32 x 16 batch takes ~0.15 s, where one slow run in five moves a median by 10 %.
SPEED_SECONDS_PER_SHAPE, SPEED_ROUNDS_MAX = 2.0, 25
# The longest one timed run may be predicted to take: B is cut to fit (module docstring).
SPEED_SECONDS_PER_RUN = 2.0
# The invariance run's batch of texts together holds at most this many padded tokens (bundle.invariance.together):
# the shortest parity texts that fit, 16 of the 17 for MiniLM and a 0.6B model alike, where all 17 padded to 600
# tokens took a 0.6B model 85 of its invariance run's 121 s.
TOGETHER_TOKENS = 4096
# An image model's speed shapes: client batches of images, and a lone image (every image has the same tokens).
IMAGE_SPEED_BATCHES = (32, 1)


class TextFeeds:
    """A text model's measuring feeds: the parity texts' token ids in their batches; the longest makes the speed
    feeds."""

    shapes = SPEED_SHAPES
    probe_length = SPEED_SHAPES[1][1]

    def __init__(self, batches: list[list[list[int]]], pad_id: int, names: Sequence[str]) -> None:
        self.batches, self.pad_id, self.names = batches, pad_id, names
        self.longest = max((ids for batch in batches for ids in batch), key=len)

    def speed(self, shapes: Sequence[tuple[int, int]]) -> dict[str, dict[str, np.ndarray]]:
        return speed_feeds(self.longest, self.pad_id, self.names, shapes)

    def invariance(self, session: Any) -> float:
        return batch_max_abs_diff(session, self.batches, self.pad_id, TOGETHER_TOKENS)


class ImageFeeds:
    """An image model's: the parity images (C, H, W) in their batches, each `tokens` tokens; the speed feeds are
    IMAGE_SPEED_BATCHES copies of the last one."""

    def __init__(self, batches: list[list[np.ndarray]], tokens: int) -> None:
        self.batches, self.tokens = batches, tokens
        self.shapes = tuple((count, tokens) for count in IMAGE_SPEED_BATCHES)
        self.probe_length = tokens

    def speed(self, shapes: Sequence[tuple[int, int]]) -> dict[str, dict[str, np.ndarray]]:
        image = self.batches[-1][-1]
        return {f"{count}x{self.tokens}": {PIXEL_VALUES: np.stack([image] * count)} for count, _ in shapes}

    def invariance(self, session: Any) -> float:
        return image_max_abs_diff(session, self.batches)


def measure_entries(entries: list[GraphEntry], bundle_dir: Path, feeds: TextFeeds | ImageFeeds) -> list[GraphEntry]:
    """`entries` with `measured` filled in for every fast graph, on every provider here it is meant for, on
    `feeds`: the parity inputs (TextFeeds, ImageFeeds)."""
    import onnxruntime as ort

    fast: dict[str, Path] = {e.variant: bundle_dir / e.file for e in entries if e.kind == "fast"}
    providers = [p for p, name in ORT_PROVIDERS.items() if name in ort.get_available_providers()]
    figures: dict[str, dict[str, Measured]] = {variant: {} for variant in fast}
    for provider in providers:
        meant: set[str] = {e.variant for e in entries if e.kind == "fast" and ORT_PROVIDERS[provider] in e.providers}
        sessions = {v: open_session(path, provider) for v, path in fast.items() if v in meant}
        started = time.perf_counter()
        speed = timed(sessions, provider, feeds) if len(sessions) > 1 else {}
        log.info("%s: speed of %s timed in %.0f s", provider, "/".join(speed) or "none", time.perf_counter() - started)
        for variant, session in sessions.items():
            started = time.perf_counter()
            invariance = feeds.invariance(session)
            figures[variant][provider] = measured(invariance, speed.get(variant, {}), provider)
            log.info("%s %s: batch invariance %.2g, measured in %.0f s", provider, variant, invariance,
                     time.perf_counter() - started)
    return [e.model_copy(update={"measured": figures[e.variant]}) if e.kind == "fast" else e for e in entries]


def timed(sessions: dict[str, Any], provider: str, feeds: TextFeeds | ImageFeeds) -> dict[str, dict[str, float]]:
    """variant -> shape -> median ms per batch, at the feeds' shapes with B cut to what a one-row probe allows
    (module docstring)."""
    length = feeds.probe_length
    probe = feeds.speed(((1, length),))
    seconds = max(min(by_shape[s]) for by_shape in round_times(sessions, provider, probe, 1).values()
                  for s in probe) / 1000
    shapes = bounded_shapes(SPEED_SECONDS_PER_RUN * length / max(seconds, 1e-9), feeds.shapes)
    times = round_times(sessions, provider, feeds.speed(shapes), SPEED_ROUNDS)
    return {name: {shape: statistics.median(v) for shape, v in by_shape.items()} for name, by_shape in times.items()}


def bounded_shapes(tokens_per_run: float,
                   shapes: Sequence[tuple[int, int]] = SPEED_SHAPES) -> tuple[tuple[int, int], ...]:
    """`shapes` (B x T) with each B cut (to 1 at least) so that B x T is at most `tokens_per_run`."""
    return tuple((max(1, min(batch, int(tokens_per_run // length))), length) for batch, length in shapes)


def speed_feeds(
    ids: Sequence[int], pad_id: int, names: Sequence[str] = INPUT_NAMES,
    shapes: Sequence[tuple[int, int]] = SPEED_SHAPES,
) -> dict[str, dict[str, np.ndarray]]:
    """{"32x128": feed, ...}: the token ids of one long text (first [CLS], last [SEP]) cut to each T; a T over
    the text's length (the model's max length) is cut to it, and the key says so."""
    feeds = {}
    for batch, length in shapes:
        row = [*ids[: min(length, len(ids)) - 1], ids[-1]]  # (T,)
        feeds[f"{batch}x{len(row)}"] = pad([row] * batch, pad_id, names)  # (B, T) each
    return feeds


def ms_per_round(paths: dict[str, Path], provider: str, feeds: dict[str, dict[str, np.ndarray]],
                 rounds: int = SPEED_ROUNDS) -> dict[str, dict[str, list[float]]]:
    """round_times of the graphs at `paths`, each opened with the served options."""
    return round_times({name: open_session(path, provider) for name, path in paths.items()}, provider, feeds, rounds)


def round_times(sessions: dict[str, Any], provider: str, feeds: dict[str, dict[str, np.ndarray]],
                rounds: int = SPEED_ROUNDS) -> dict[str, dict[str, list[float]]]:
    """name -> shape -> milliseconds of each round's run: in every round each graph runs once, in turn (the
    order reversed every other round); at least `rounds` rounds, more for short batches (SPEED_SECONDS_PER_SHAPE).
    Each graph is asked for its first output (a bundle's: embeddings) and given the feeds it takes."""
    clock = time.process_time if provider == "cpu" else time.perf_counter
    times: dict[str, dict[str, list[float]]] = {name: {shape: [] for shape in feeds} for name in sessions}
    for shape, feed in feeds.items():
        runs = {name: _first_output(session, feed) for name, session in sessions.items()}
        warm_up = max(_seconds(run) for run in runs.values())  # allocations and kernel choice
        for turn in range(max(rounds, min(SPEED_ROUNDS_MAX, math.ceil(SPEED_SECONDS_PER_SHAPE / warm_up)))):
            order = list(runs) if turn % 2 == 0 else list(runs)[::-1]
            for name in order:
                started = clock()
                runs[name]()
                times[name][shape].append(1000 * (clock() - started))
    return times


def _seconds(run: Any) -> float:
    started = time.perf_counter()
    run()
    return max(time.perf_counter() - started, 1e-6)


def _first_output(session: Any, feed: dict[str, np.ndarray]) -> Any:
    """A call running `session` on the inputs of `feed` it takes, for its first output."""
    names = [session.get_outputs()[0].name]
    inputs = {i.name: feed[i.name] for i in session.get_inputs()}
    return lambda: session.run(names, inputs)


def measured(invariance: float, speed: dict[str, float], provider: str) -> Measured:
    return Measured(batch_max_abs_diff=invariance, ms_per_batch=speed,
                    clock="process_cpu" if provider == "cpu" else "wall")
