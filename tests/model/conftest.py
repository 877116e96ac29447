"""tests/model runs its tiny models on one torch thread.

The models here are a few thousand weights wide, so intra-op threads only add overhead; with one
thread the seeded training runs take the same floating-point path on every machine, whatever its
core count, and do not spin OpenMP workers on a shared, oversubscribed CPU (measured on the 2-core
dev box at load ~15: the learning tests took ~65 s of wall time each with torch's default 2 threads,
~1 s with one).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
