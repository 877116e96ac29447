"""Reading a server's Prometheus /metrics text (with prometheus_client's own parser): the bench and the tests
(tests.helpers.metrics) read the same figures the same way."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def sample(text: str, name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels` (0 when there is none)."""
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    )


def quantile(before: str, after: str, name: str, q: float, **labels: str) -> float:
    """The q-quantile of the observations a histogram `name` (its _bucket series whose labels include `labels`)
    gained between two /metrics texts, interpolated linearly within its bucket, as Prometheus'
    histogram_quantile does."""
    bounds = sorted({float(s.labels["le"]) for f in text_string_to_metric_families(after) for s in f.samples
                     if s.name == f"{name}_bucket" and labels.items() <= s.labels.items()})
    counts = [_gained(before, after, f"{name}_bucket", le=_le(b), **labels) for b in bounds]
    if not counts or counts[-1] == 0:
        return float("nan")
    rank, lower, below = q * counts[-1], 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return bound
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return float("nan")


def _gained(before: str, after: str, name: str, **labels: str) -> float:
    return sample(after, name, **labels) - sample(before, name, **labels)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)
