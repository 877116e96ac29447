"""The explorer on image models, in Chromium against one real server of two random-weight image bundles
(tests/helpers/vision.py: a ViT reading 32 x 32 pixels, a 4 x 4 grid after its class token, served first; a DINOv2
with four registers reading 24 x 40, a 3 x 5 grid after five tokens) and a CLIP pair, whose image side the model
picker lists as an entry of its own. The page takes an image from its file input or
dropped on its box, draws the chosen map's row of the class token over the image's patches, and a patch clicked
shows that patch's row. The overlay is read back from the page, cell by cell: the values it says it drew (its data-*
attributes) against /attention's, fetched here with httpx, and each cell's colour, read from the canvas, against the
page's own colour scale at /attention's value (the float16 the page asks for). A screenshot goes to
build/screenshots/.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.browser.watch import WAIT_MS, Watched
from tests.helpers.process import running
from tests.helpers.vision import shared_bundle, vit_and_clip

TOLERANCE = 6e-4  # float16 rounding of values <= 1 (at most 2**-11 relative)
DINOV2, CLIP = "dinov2", "clip"

# Per cell of the overlay canvas, whether the colour at its centre is the page's colour for `values[k]` on [0, max].
COLOURS = """async (canvas, values) => {
    const { TABLE, level } = await import("/explore/colormap.js");
    const cell = Number(canvas.dataset.cell), cols = Number(canvas.dataset.cols);
    const dpr = canvas.width / canvas.clientWidth, ctx = canvas.getContext("2d");
    const max = Math.max(0, ...values);
    return values.map((value, k) => {
        const x = ((k % cols) + 0.5) * cell, y = (Math.floor(k / cols) + 0.5) * cell;
        const rgb = ctx.getImageData(Math.floor(x * dpr), Math.floor(y * dpr), 1, 1).data, t = 3 * level(value, max);
        return [0, 1, 2].every((c) => rgb[c] === TABLE[t + c]);
    });
}"""
DROP = """([data, name, type]) => {
    const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
    const transfer = new DataTransfer();
    transfer.items.add(new File([bytes], name, { type }));
    return transfer;
}"""


def picture(seed: int, size: tuple[int, int], fmt: str) -> bytes:
    """Seeded noise, (height, width), as `fmt` bytes."""
    pixels = np.random.default_rng(seed).integers(0, 256, size=(*size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


PNG, JPEG = picture(1, (48, 64), "PNG"), picture(2, (70, 52), "JPEG")


@pytest.fixture(scope="module")
def image_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The run's shared ViT, CLIP and DINOv2-with-registers bundles (tests.helpers.vision.shared_bundle)."""
    root = tmp_path_factory.mktemp("image-explorer")
    vit, clip = vit_and_clip(tmp_path_factory)
    _, dinov2 = shared_bundle(tmp_path_factory, "dinov2-registers-small")
    bundles = ("--bundle", f"{DINOV2}={dinov2}", "--bundle", f"{CLIP}={clip}")
    with running(vit, root / "server.log", *bundles) as server:
        yield server.url


def maps(base_url: str, model: str, image: bytes, mime: str, **body: Any) -> tuple[dict[str, int], np.ndarray,
                                                                                    np.ndarray]:
    """/attention's grid and its one map of `image`, (n, n): float32, and float16 as the page asks for it."""
    request = {"model": model, "inputs": [f"data:{mime};base64,{base64.b64encode(image).decode()}"], **body}
    answers = []
    for extra in ({}, {"encoding": "base64", "dtype": "float16"}):
        response = httpx.post(f"{base_url}/attention", json={**request, **extra}, timeout=30)
        assert response.status_code == 200, response.text
        answers.append(response.json())
    full, half = answers
    n = len(full["data"][0]["tokens"])
    f32 = np.asarray(full["data"][0]["attention"], dtype=np.float32).reshape(-1, n, n)[0]
    f16 = np.frombuffer(base64.b64decode(half["data"][0]["attention"]), dtype="<f2").reshape(-1, n, n)[0]
    return full["grid"], f32, f16.astype(np.float32)


def wait_drawn(watched: Watched, image: str, title: str, model: str) -> None:
    selector = (f'#views[data-state=ready][data-view=image][data-title="{title}"][data-model="{model}"]'
                f' .panel[data-image="{image}"]')
    watched.page.wait_for_selector(selector, timeout=WAIT_MS)


def check_overlay(watched: Watched, grid: dict[str, int], f32: np.ndarray, f16: np.ndarray, query: int) -> None:
    """The overlay shows row `query` of the map over the grid's patches: its values, and its colours cell by cell."""
    overlay = watched.page.locator(".patches canvas.overlay")
    data = overlay.evaluate("n => ({...n.dataset})")
    assert [int(data[k]) for k in ("rows", "cols", "first", "query")] == [
        grid["rows"], grid["cols"], grid["first"], query]
    patches = slice(grid["first"], None)
    shown = np.asarray([float(v) for v in data["values"].split(",")], dtype=np.float32)
    assert np.array_equal(shown, f16[query, patches])  # what the page was answered
    assert float(np.abs(shown - f32[query, patches]).max()) <= TOLERANCE
    assert all(overlay.evaluate(COLOURS, f16[query, patches].tolist()))


def click_patch(watched: Watched, row: int, col: int) -> None:
    overlay = watched.page.locator(".patches canvas.overlay")
    cell = float(overlay.get_attribute("data-cell") or "nan")
    box = overlay.bounding_box()
    assert box is not None
    watched.page.mouse.click(box["x"] + (col + 0.5) * cell, box["y"] + (row + 0.5) * cell)


def test_the_overlay_shows_attention_s_maps_cell_by_cell(watched: Watched, image_server: str) -> None:
    watched.page.goto(f"{image_server}/explore")
    watched.page.wait_for_selector("#views[data-state=idle][data-view=image]", state="attached", timeout=WAIT_MS)
    assert watched.page.is_visible("#image-form") and not watched.page.is_visible("#text-a")
    vit = watched.page.get_attribute("#views", "data-model") or ""
    watched.page.set_input_files("#image-file", files=[{"name": "noise.png", "mimeType": "image/png", "buffer": PNG}])
    wait_drawn(watched, "noise.png", "layer 0 · head 0", vit)
    grid, f32, f16 = maps(image_server, vit, PNG, "image/png", layers=[0], heads=[0])
    check_overlay(watched, grid, f32, f16, query=0)  # from the class token

    click_patch(watched, 2, 1)
    patch = grid["first"] + 2 * grid["cols"] + 1
    watched.page.wait_for_selector(f".patches canvas.overlay[data-query='{patch}']", timeout=WAIT_MS)
    check_overlay(watched, grid, f32, f16, query=patch)  # where that patch looks
    click_patch(watched, 2, 1)  # again: back to the class token
    watched.page.wait_for_selector(".patches canvas.overlay[data-query='0']", timeout=WAIT_MS)

    watched.page.select_option("#layer", "1")
    watched.page.select_option("#head", "1")
    wait_drawn(watched, "noise.png", "layer 1 · head 1", vit)
    check_overlay(watched, *maps(image_server, vit, PNG, "image/png", layers=[1], heads=[1]), query=0)
    watched.page.select_option("#combine", "rollout")
    wait_drawn(watched, "noise.png", "rollout over 2 layers", vit)
    check_overlay(watched, *maps(image_server, vit, PNG, "image/png", aggregation="rollout"), query=0)
    watched.shot("image-explorer-rollout")

    transfer = watched.page.evaluate_handle(DROP, [base64.b64encode(JPEG).decode(), "dropped.jpg", "image/jpeg"])
    watched.page.dispatch_event("#image-form", "drop", {"dataTransfer": transfer})
    wait_drawn(watched, "dropped.jpg", "rollout over 2 layers", vit)
    check_overlay(watched, *maps(image_server, vit, JPEG, "image/jpeg", aggregation="rollout"), query=0)

    watched.page.select_option("#combine", "none")
    watched.page.select_option("#model", DINOV2)  # a non-square grid after a class token and four registers
    wait_drawn(watched, "dropped.jpg", "layer 1 · head 1", DINOV2)
    grid, f32, f16 = maps(image_server, DINOV2, JPEG, "image/jpeg", layers=[1], heads=[1])
    assert (grid["rows"], grid["cols"], grid["first"]) == (3, 5, 5)
    check_overlay(watched, grid, f32, f16, query=0)
    click_patch(watched, 2, 4)
    patch = grid["first"] + 2 * grid["cols"] + 4
    watched.page.wait_for_selector(f".patches canvas.overlay[data-query='{patch}']", timeout=WAIT_MS)
    check_overlay(watched, grid, f32, f16, query=patch)
    watched.shot("image-explorer-patch")
    watched.assert_clean()


def test_a_file_that_is_not_an_image_is_refused_on_the_page(watched: Watched, image_server: str) -> None:
    watched.page.goto(f"{image_server}/explore")
    watched.page.wait_for_selector("#views[data-state=idle]", state="attached", timeout=WAIT_MS)
    watched.page.set_input_files("#image-file", files=[{"name": "notes.png", "mimeType": "image/png",
                                                        "buffer": b"plain text, not a picture"}])
    watched.page.wait_for_selector("#views[data-state=error]", state="attached", timeout=WAIT_MS)
    assert "input 0" in (watched.page.text_content("#message") or "")
    watched.assert_clean(expected_statuses=(422,))


def test_a_pair_s_image_side_is_an_entry_of_the_picker(watched: Watched, image_server: str) -> None:
    """A two-tower model is listed twice: its texts (the text tower) and its images (the image tower's layers, heads
    and grid); the image side's requests name the model, whose images go to its image tower."""
    watched.page.goto(f"{image_server}/explore")
    watched.page.wait_for_selector("#views[data-state=idle]", state="attached", timeout=WAIT_MS)
    options = watched.page.eval_on_selector_all("#model option", "options => options.map(o => o.value)")
    assert options[-2:] == [CLIP, f"{CLIP} · images"]
    watched.page.select_option("#model", CLIP)
    assert watched.page.is_visible("#text-a") and not watched.page.is_visible("#image-form")
    watched.page.select_option("#model", f"{CLIP} · images")
    assert watched.page.is_visible("#image-form") and not watched.page.is_visible("#text-a")
    watched.page.set_input_files("#image-file", files=[{"name": "noise.png", "mimeType": "image/png", "buffer": PNG}])
    wait_drawn(watched, "noise.png", "layer 0 · head 0", CLIP)
    grid, f32, f16 = maps(image_server, CLIP, PNG, "image/png", layers=[0], heads=[0])
    assert (grid["rows"], grid["cols"], grid["first"]) == (4, 4, 1)
    check_overlay(watched, grid, f32, f16, query=0)
    watched.assert_clean()
