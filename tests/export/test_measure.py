"""What export times (export.measure): only graphs it has to choose between, on batches bounded in time."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundle.manifest import Manifest
from export.measure import SPEED_SHAPES, bounded_shapes


@pytest.mark.parametrize(("tokens_per_run", "shapes"), [
    (1e9, SPEED_SHAPES),  # a small model: the shapes as they are
    (4096, ((32, 128), (32, 16), (8, 512))),  # 32 x 128 and 8 x 512 are 4096 tokens each
    (1000, ((7, 128), (32, 16), (1, 512))),
    (10, ((1, 128), (1, 16), (1, 512))),  # one row at least, whatever the bound
])
def test_each_batch_is_cut_to_the_tokens_one_bounded_run_may_take(tokens_per_run, shapes):
    assert bounded_shapes(tokens_per_run) == shapes


def test_a_lone_fast_graph_gets_its_invariance_and_no_times(tiny_bundle: Path) -> None:
    """The fp32-only bundle: nothing for variant=auto to choose, so nothing timed (tests/export/test_fusion.py reads
    the times of a bundle with two fast graphs)."""
    figures = Manifest.read(tiny_bundle).graph("fast", "fp32").measured["cpu"]  # type: ignore[union-attr]
    assert figures.batch_invariant and figures.ms_per_batch == {}
