"""Decoders' masks in the explorer, in Chromium against one real server of two random-weight decoders
(tests/helpers/exports.py):

    qwen3-classifier        causal, the default: 3 layers, layer 0 global, layers 1 and 2 sliding, 3 tokens back
    embeddinggemma-scorer   bidirectional ("gemma"): layers 0 and 2 sliding, 4 tokens each side, layer 1 global

The page must draw every key a query cannot see in grey (masked, not a low weight): for the causal model the
keys after the query in every layer, in the mixed or rolled-out maps too, and in its sliding layers the keys more
than 3 back; for the bidirectional one only the keys beyond its two-sided windows. Each map's grey cells are read
from the canvases, cell by cell, and checked twice: against the masks as defined (model/attention.py) and
against the zeros of the maps /attention answers (fetched here with httpx), so that a page masking the wrong
half, or a test fixture that lost its mask, fails."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
from playwright.sync_api import Locator

from tests.browser.test_local_attention import GREY
from tests.browser.test_models import half_maps
from tests.browser.watch import Watched
from tests.helpers.exports import Exported
from tests.helpers.process import running

TEXT = "the acting is wooden but the soundtrack is wonderful"
QWEN3_WINDOWS = [None, 3, 3]  # per layer, the keys back a sliding layer sees (tests/helpers/decoders.py)
GEMMA_WINDOWS = [4, None, 4]  # per layer, the keys on each side
MASKED = "masked: a causal model's token does not see later tokens"

# The canvas's cells as rows of "#" (grey: drawn masked) and "." (coloured by a weight), each read at its centre:
# an m x m map whose top-left corner is at (x, y) CSS pixels, `cell` pixels a cell.
CELLS = """(canvas, [x, y, cell, m, grey]) => {
    const dpr = canvas.width / canvas.clientWidth, ctx = canvas.getContext("2d");
    const at = (i) => Math.floor((i + 0.5) * cell);
    return Array.from({length: m}, (_, row) => Array.from({length: m}, (_, col) => {
        const rgb = ctx.getImageData(Math.floor((x + at(col)) * dpr), Math.floor((y + at(row)) * dpr), 1, 1).data;
        return [0, 1, 2].every((c) => rgb[c] === grey[c]) ? "#" : ".";
    }).join(""));
}"""


@pytest.fixture(scope="module")
def decoders(family_export: Callable[[str], Exported], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    qwen3, gemma = (family_export(name).bundle for name in ("qwen3-classifier", "embeddinggemma-scorer"))
    with running(qwen3, tmp_path_factory.mktemp("decoders") / "server.log", "--bundle", f"gemma={gemma}") as server:
        yield server.url


def masks(m: int, causal: bool, window: int | None) -> list[str]:
    """The keys (columns) each query (row) cannot see, by the masks' definitions: under the causal mask the keys
    after it; in a sliding layer the keys more than `window` away (with the causal mask, the earlier ones only)."""
    return ["".join("#" if (causal and j > i) or (window is not None and abs(i - j) > window) else "."
                    for j in range(m)) for i in range(m)]


def zeros(square: np.ndarray) -> list[str]:
    """The cells of one (m, m) map the model gave no weight, in the same rows of "#" and "."."""
    return ["".join("#" if value == 0 else "." for value in row) for row in square]


def canvas_numbers(watched: Watched, *names: str) -> tuple[Locator, list[float]]:
    """The view's canvas and the numbers its data-* attributes carry (where its cells are drawn)."""
    canvas = watched.page.locator(".panel canvas").first
    return canvas, [float(canvas.get_attribute(f"data-{name}") or "") for name in names]


def heatmap_cells(watched: Watched) -> list[str]:
    canvas, (left, top, cell, m) = canvas_numbers(watched, "left", "top", "cell", "tokens")
    return canvas.evaluate(CELLS, [left, top, cell, int(m), GREY])


def thumbnail_cells(watched: Watched, layer: int, head: int, m: int) -> list[str]:
    """One thumbnail of the grid (drawn one crisp block a cell when it has fewer tokens than pixels)."""
    canvas, (left, top, thumb, gap) = canvas_numbers(watched, "left", "top", "thumb", "gap")
    corner = (left + head * (thumb + gap), top + layer * (thumb + gap))
    return canvas.evaluate(CELLS, [*corner, thumb / m, m, GREY])


def layer_labels(watched: Watched) -> list[str]:
    return watched.page.locator("#layer option").evaluate_all("nodes => nodes.map(n => n.textContent)")


def test_a_causal_model_masks_the_later_keys_in_every_map(watched: Watched, decoders: str) -> None:
    page = watched.page
    watched.open(decoders)
    watched.run(TEXT)
    info = page.inner_text("#model-info")
    assert "· causal: each token sees only itself and the tokens before it ·" in info
    assert "· layers 1, 2 attend 3 tokens back ·" in info
    assert layer_labels(watched) == ["0", "1 · local −3", "2 · local −3"]
    maps = half_maps(decoders, TEXT)  # (layers, heads, m, m)
    m = maps.shape[-1]
    for layer, window in enumerate(QWEN3_WINDOWS):
        page.select_option("#layer", str(layer))
        watched.wait_for("heatmap", f"layer {layer}{'' if window is None else ' (local −3)'} · head 0", TEXT)
        assert heatmap_cells(watched) == masks(m, True, window) == zeros(maps[layer, 0]), layer
    label = page.locator(".panel canvas").first.get_attribute("aria-label") or ""
    assert "Keys after the query are grey" in label and "Keys more than 3 tokens before the query are grey" in label

    page.locator(".panel canvas").first.focus()
    page.keyboard.press("ArrowRight")  # layer 2, query 0 -> key 1: a later token
    shown = watched.readout()
    assert (shown["query"], shown["key"], shown["outside"], float(shown["value"])) == ("0", "1", "true", 0.0)
    assert f"({MASKED})" in shown["text"]
    for _ in range(5):
        page.keyboard.press("ArrowDown")  # query 5 -> key 1: 4 back, beyond the window
    shown = watched.readout()
    assert (shown["query"], shown["key"], shown["outside"], float(shown["value"])) == ("5", "1", "true", 0.0)
    assert "(beyond the local window of 3 tokens back: not attended)" in shown["text"]
    page.keyboard.press("ArrowRight")  # query 5 -> key 2: 3 back, the window's edge
    shown = watched.readout()
    assert (shown["outside"], float(shown["value"]) > 0) == ("false", True)
    assert "masked" not in shown["text"] and "not attended" not in shown["text"]

    page.select_option("#combine", "rollout")  # across layers: the windows spread, the triangle stays
    watched.wait_for("heatmap", "rollout over 3 layers", TEXT)
    assert heatmap_cells(watched) == masks(m, True, None) == zeros(half_maps(decoders, TEXT, aggregation="rollout"))

    page.click("#tab-grid")
    watched.wait_for("grid", panel_text=TEXT)
    for layer, window in enumerate(QWEN3_WINDOWS):
        for head in range(maps.shape[1]):
            assert thumbnail_cells(watched, layer, head, m) == masks(m, True, window) == zeros(maps[layer, head])
    label = page.locator(".panel canvas").first.get_attribute("aria-label") or ""
    assert "Keys after their query are grey" in label and "In layers 1 (local −3), 2 (local −3) keys beyond" in label
    watched.shot("grid-qwen3")
    watched.assert_clean()


def test_a_bidirectional_decoder_masks_only_beyond_its_windows(watched: Watched, decoders: str) -> None:
    page = watched.page
    watched.open(decoders)
    page.select_option("#model", "gemma")
    watched.wait_for("heatmap", "layer 0 (local ±4) · head 0", model="gemma")
    watched.run(TEXT)
    info = page.inner_text("#model-info")
    assert "causal" not in info and "· layers 0, 2 attend ±4 tokens ·" in info
    assert layer_labels(watched) == ["0 · local ±4", "1", "2 · local ±4"]
    maps = half_maps(decoders, TEXT, model="gemma")
    m = maps.shape[-1]
    assert m > 2 * 4 + 1, "too few tokens for a window to mask anything"
    for layer, window in reversed(list(enumerate(GEMMA_WINDOWS))):
        page.select_option("#layer", str(layer))
        title = f"layer {layer}{'' if window is None else ' (local ±4)'} · head 0"
        watched.wait_for("heatmap", title, TEXT, model="gemma")
        assert heatmap_cells(watched) == masks(m, False, window) == zeros(maps[layer, 0]), layer
    label = page.locator(".panel canvas").first.get_attribute("aria-label") or ""
    assert "after the query" not in label and "Keys beyond ±4 tokens of the query are grey" in label
    page.locator(".panel canvas").first.focus()
    page.keyboard.press("ArrowRight")  # layer 0, query 0 -> key 1: a later key, seen
    shown = watched.readout()
    assert (shown["query"], shown["key"], shown["outside"], float(shown["value"]) > 0) == ("0", "1", "false", True)
    assert "masked" not in shown["text"] and "not attended" not in shown["text"]

    page.click("#tab-grid")
    watched.wait_for("grid", panel_text=TEXT, model="gemma")
    for layer, window in enumerate(GEMMA_WINDOWS):
        for head in range(maps.shape[1]):
            assert thumbnail_cells(watched, layer, head, m) == masks(m, False, window) == zeros(maps[layer, head])
    label = page.locator(".panel canvas").first.get_attribute("aria-label") or ""
    assert "after their query" not in label and "In layers 0 (local ±4), 2 (local ±4) keys beyond" in label
    watched.shot("grid-embeddinggemma")
    watched.assert_clean()
