"""A decoder's causal maps in the explorer, in Chromium against a real server of a random-weight Qwen3 classifier
(tests/helpers/exports.py "qwen3-classifier": 3 layers, layer 0 global, layers 1 and 2 sliding with a window of
three tokens back). The page says the model is causal and how far its local layers reach back, and draws every
key after its query in grey, masked rather than a low weight: the maps show as triangles, the sliding layers'
as bands below the diagonal."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.browser.test_local_attention import GREY, pixel
from tests.browser.watch import Watched
from tests.helpers.exports import Exported
from tests.helpers.process import running

TEXT = "the acting is wooden but the soundtrack is wonderful"


@pytest.fixture(scope="module")
def qwen3(family_export: Callable[[str], Exported], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    bundle = family_export("qwen3-classifier").bundle
    with running(bundle, tmp_path_factory.mktemp("qwen3") / "server.log") as server:
        yield server.url


def test_causal_maps_mask_the_later_keys(watched: Watched, qwen3: str) -> None:
    page = watched.page
    watched.open(qwen3)
    watched.run(TEXT)
    info = page.inner_text("#model-info")
    assert "causal: each token sees only itself and the tokens before it" in info
    assert "layers 1, 2 attend −3 tokens" in info
    labels = page.locator("#layer option").evaluate_all("nodes => nodes.map(n => n.textContent)")
    assert labels == ["0", "1 · local −3", "2 · local −3"]
    # layer 0, global: a later key is masked, an earlier one coloured by its weight, however far back
    assert pixel(watched, 1, 4) == GREY and pixel(watched, 6, 1) != GREY and pixel(watched, 4, 4) != GREY
    page.select_option("#layer", "1")
    watched.wait_for("heatmap", "layer 1 (local −3) · head 0", TEXT)
    assert pixel(watched, 6, 2) == GREY and pixel(watched, 6, 3) != GREY  # 4 back is beyond, 3 back within
    assert pixel(watched, 3, 6) == GREY  # later: masked in every layer
    page.locator(".panel canvas").first.focus()
    page.keyboard.press("ArrowRight")  # query 0 -> key 1: a later token
    shown = watched.readout()
    assert (shown["query"], shown["key"], shown["outside"], float(shown["value"])) == ("0", "1", "true", 0.0)
    assert "masked: a causal model's token does not see later tokens" in shown["text"]
    page.click("#tab-grid")
    watched.wait_for("grid", panel_text=TEXT)
    watched.shot("grid-qwen3")
    watched.assert_clean()
