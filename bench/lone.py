"""python -m bench.lone --bundle B: what the batcher's idle path buys a lone request, in process, paired.

One short text at a time through the core (`ServedModel.run`, as the /embed route calls it, no HTTP), with a
client's pause before each (the batcher idle, as between one caller's sequential requests), alternating request
by request between the idle path on and off (`Batcher.at_once`: off, every input goes through the queue and the
worker task, as before the idle path). Pairing request by request lets a busy machine move both alike, where
two servers measured one after the other see different loads. Prints, for each way, the median wall time
of a request with its quartiles and the median CPU time the event-loop thread spent on it (the graph runs in
another thread).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

from inference.options import ServingOptions
from inference.registry import ServedBundle, load_bundles, served_names, start_models
from inference.runtime.graphs import FAST

TEXT = "the quick brown fox jumps over the lazy dog near the river"  # 14 words, about 16 tokens with the specials


async def measure(bundle: Path, requests: int, variant: str, pause_s: float) -> dict[str, dict[str, list[float]]]:
    """Per way ("queued", "at once"): each request's wall and event-loop CPU seconds."""
    options = ServingOptions(cache_bytes=0, variant=variant)  # the cache off: every request runs the graph
    bundles = [ServedBundle(path=bundle)]
    loaded = load_bundles(bundles, options.load_options())
    registry, executors = start_models(served_names(bundles, loaded), loaded, options)
    model = registry.default
    figures: dict[str, dict[str, list[float]]] = {way: {"wall": [], "cpu": []} for way in ("queued", "at once")}
    try:
        await model.warm_up()
        for i in range(requests):
            way = "at once" if i % 2 else "queued"
            model.batcher.at_once = way == "at once"
            await asyncio.sleep(pause_s)
            wall, cpu = time.perf_counter(), time.thread_time()
            await model.run([TEXT], [FAST])
            figures[way]["wall"].append(time.perf_counter() - wall)
            figures[way]["cpu"].append(time.thread_time() - cpu)
    finally:
        await model.batcher.stop()
        for executor in executors:
            executor.shutdown()
    return figures


def report(figures: dict[str, dict[str, list[float]]]) -> list[str]:
    lines = []
    for way, got in figures.items():
        wall = statistics.quantiles(got["wall"], n=4)  # quartiles
        lines.append(f"{way:8s} wall p50 {wall[1] * 1e3:.3f} ms (quartiles {wall[0] * 1e3:.3f}-{wall[2] * 1e3:.3f}), "
                     f"event-loop CPU p50 {statistics.median(got['cpu']) * 1e6:.0f} us, {len(got['wall'])} requests")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--requests", type=int, default=2000, help="requests in all, half each way")
    parser.add_argument("--variant", default="fp32")
    parser.add_argument("--pause-ms", type=float, default=2.0, help="a client's pause before each request")
    args = parser.parse_args()
    figures = asyncio.run(measure(args.bundle, args.requests, args.variant, args.pause_ms / 1000))
    print("\n".join(report(figures)))


if __name__ == "__main__":
    main()
