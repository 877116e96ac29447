"""ModernBERT's local layers in the explorer, in Chromium against a real server of a random-weight ModernBERT
(tests/helpers/exports.py "modernbert-classifier": 3 layers, layer 1 local with a window of two tokens on each
side, layers 0 and 2 global). The page says which layers are local and how far they reach, and draws the keys
beyond a local layer's window in grey, not in the colour of a low weight: the band shows as a band."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.browser.watch import Watched
from tests.helpers.exports import Exported
from tests.helpers.process import running

TEXT = "the acting is wooden but the soundtrack is wonderful"
GREY = [216, 216, 216, 255]  # colormap.js OUTSIDE


@pytest.fixture(scope="module")
def modernbert(family_export: Callable[[str], Exported], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    bundle = family_export("modernbert-classifier").bundle
    with running(bundle, tmp_path_factory.mktemp("modernbert") / "server.log") as server:
        yield server.url


def pixel(watched: Watched, row: int, col: int) -> list[int]:
    """The heatmap's colour at the centre of cell (row, col), read from its canvas."""
    return watched.page.locator(".panel canvas").first.evaluate(
        """(canvas, [row, col]) => {
            const {left, top, cell} = canvas.dataset, dpr = canvas.width / canvas.clientWidth;
            const x = (Number(left) + (col + 0.5) * Number(cell)) * dpr;
            const y = (Number(top) + (row + 0.5) * Number(cell)) * dpr;
            return Array.from(canvas.getContext("2d").getImageData(Math.floor(x), Math.floor(y), 1, 1).data);
        }""", [row, col])


def test_local_layers_are_named_and_drawn_as_bands(watched: Watched, modernbert: str) -> None:
    page = watched.page
    watched.open(modernbert)
    watched.run(TEXT)
    assert "· layer 1 attends ±2 tokens ·" in page.inner_text("#model-info")
    labels = page.locator("#layer option").evaluate_all("nodes => nodes.map(n => n.textContent)")
    assert labels == ["0", "1 · local ±2", "2"]
    assert pixel(watched, 1, 4) != GREY  # layer 0 is global: every key is coloured by its weight
    page.select_option("#layer", "1")
    watched.wait_for("heatmap", "layer 1 (local ±2) · head 0", TEXT)
    assert pixel(watched, 1, 4) == GREY and pixel(watched, 1, 3) != GREY  # |1 - 4| > 2, |1 - 3| = 2
    page.locator(".panel canvas").first.focus()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    shown = watched.readout()
    assert (shown["query"], shown["key"], shown["outside"], float(shown["value"])) == ("0", "3", "true", 0.0)
    assert "beyond the local window of ±2 tokens: not attended" in shown["text"]
    page.keyboard.press("ArrowLeft")
    assert watched.readout()["outside"] == "false"
    page.click("#tab-grid")
    watched.wait_for("grid", panel_text=TEXT)
    watched.shot("grid-modernbert")
    watched.assert_clean()
