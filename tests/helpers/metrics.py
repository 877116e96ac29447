"""Reading the service's Prometheus /metrics text (with prometheus_client's own parser) in tests."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def sample(text: str, name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels` (0 when there is none)."""
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    )


def read(url: str, name: str, **labels: str) -> float:
    """sample() of a running server's /metrics at `url`."""
    return sample(httpx.get(f"{url}/metrics", timeout=10).text, name, **labels)
