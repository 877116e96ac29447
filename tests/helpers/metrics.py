"""Reading the service's Prometheus /metrics text in tests: bench.promtext's readers, and read() of a running
server."""

from __future__ import annotations

import httpx

from bench.promtext import quantile, sample

__all__ = ["quantile", "read", "sample"]


def read(url: str, name: str, **labels: str) -> float:
    """sample() of a running server's /metrics at `url`."""
    return sample(httpx.get(f"{url}/metrics", timeout=10).text, name, **labels)
