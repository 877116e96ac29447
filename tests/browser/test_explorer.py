"""The attention explorer in a real browser (Debian's Chromium, Playwright) against a real server on the tiny
bundle. What the page shows is read from the page (its read-out text and data attributes) and compared with
/attention's answer for the same text, fetched here with httpx; no test reads the drawing code's variables.
Each test also checks that every request went to 127.0.0.1 and the console logged no error.
A screenshot of each view is written to build/screenshots/.
"""

from __future__ import annotations

import base64
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from playwright.sync_api import Locator, Route

from tests.browser.watch import Watched, half_maps
from tests.helpers.process import running

TEXT = "the acting is wooden but the soundtrack is wonderful"
OTHER = "a delightful comedy with a great cast"
TOLERANCE = 6e-4  # float16 rounding (at most 2**-11 relative, values <= 1) plus the read-out's 4 decimals


def attention(base_url: str, text: str, **body: Any) -> tuple[list[dict[str, Any]], np.ndarray]:
    """/attention's tokens and float32 maps for one text."""
    response = httpx.post(f"{base_url}/attention", json={"inputs": text, **body}, timeout=30)
    assert response.status_code == 200, response.text
    item = response.json()["data"][0]
    return item["tokens"], np.asarray(item["attention"], dtype=np.float32)



def number(node: Locator, name: str) -> float:
    """A data-* attribute of a drawn canvas (its geometry: where cells are, not what they hold)."""
    return float(node.get_attribute(f"data-{name}") or "nan")


def hover_cell(watched: Watched, query: int, key: int) -> None:
    """Scroll the cell into view (the figure scrolls inside the page) and put the pointer on its centre."""
    canvas = watched.page.locator(".panel canvas").first
    left, top, cell = (number(canvas, name) for name in ("left", "top", "cell"))
    x, y = left + (key + 0.5) * cell, top + (query + 0.5) * cell  # within the canvas
    canvas.evaluate("(c, [x, y]) => { const f = c.parentElement; f.scrollTop = y - f.clientHeight / 2;"
                    " f.scrollLeft = x - f.clientWidth / 2; f.scrollIntoView({block: 'nearest'}); }", [x, y])
    box = canvas.bounding_box()
    assert box is not None
    watched.page.mouse.move(box["x"] + x, box["y"] + y)


def wait_for_message(watched: Watched, words: str) -> None:
    watched.page.wait_for_function("words => document.getElementById('message').textContent.includes(words)", arg=words)
    assert watched.page.is_visible("#message")


def shown_value(readout: dict[str, str]) -> float:
    return float(readout["text"].rsplit("= ", 1)[1])


def test_heatmap_shows_the_value_attention_returns(watched: Watched, live_server: str) -> None:
    watched.open(live_server)
    text_box = watched.page.locator("#text-a")
    text_box.fill("")
    text_box.press_sequentially(TEXT)  # typed key by key
    text_box.press("Control+Enter")
    watched.wait_for("heatmap", "layer 0 · head 0", TEXT)
    watched.page.select_option("#layer", "1")
    watched.page.select_option("#head", "1")
    watched.wait_for("heatmap", "layer 1 · head 1", TEXT)
    tokens, maps = attention(live_server, TEXT, layers=[1], heads=[1])
    halves = half_maps(live_server, TEXT, layers=[1], heads=[1])

    hover_cell(watched, 3, 5)
    shown = watched.readout()
    assert (shown["query"], shown["key"]) == ("3", "5")
    assert float(shown["value"]) == float(halves[0, 0, 3, 5])  # the page's float16 decoding, exactly
    assert abs(shown_value(shown) - maps[0, 0, 3, 5]) <= TOLERANCE
    assert f"“{tokens[3]['text']}” → key 5 “{tokens[5]['text']}”" in shown["text"]

    watched.page.locator(".panel canvas").first.focus()
    for key in ("ArrowDown", "ArrowDown", "ArrowLeft"):
        watched.page.keyboard.press(key)
    moved = watched.readout()
    assert (moved["query"], moved["key"]) == ("5", "4")
    assert abs(shown_value(moved) - maps[0, 0, 5, 4]) <= TOLERANCE

    top_label = httpx.post(f"{live_server}/classify", json={"inputs": TEXT}).json()[0][0]["label"]
    assert watched.answer_label(TEXT) == top_label
    watched.shot("heatmap")
    watched.assert_clean()


def test_combined_heads_match_the_server_aggregations(watched: Watched, live_server: str) -> None:
    watched.open(live_server)
    watched.run(TEXT)
    watched.page.select_option("#layer", "1")
    for combine in ("mean", "max", "rollout"):
        watched.page.select_option("#combine", combine)
        title = "rollout over 2 layers" if combine == "rollout" else f"layer 1 · {combine} over heads"
        watched.wait_for("heatmap", title, TEXT)
        hover_cell(watched, 2, 0)
        body = {"aggregation": combine} if combine == "rollout" else {"layers": [1], "aggregation": combine}
        halves = half_maps(live_server, TEXT, **body)
        assert float(watched.readout()["value"]) == float(halves.reshape(-1, *halves.shape[-2:])[0, 2, 0]), combine
    watched.shot("rollout")
    watched.assert_clean()


def test_hiding_special_tokens_and_renormalising_rows(watched: Watched, live_server: str) -> None:
    watched.open(live_server)
    watched.run(TEXT)
    watched.page.check("#hide-special")
    watched.page.check("#renormalise")
    watched.wait_for("heatmap", "layer 0 · head 0", TEXT)
    tokens, _ = attention(live_server, TEXT, layers=[0], heads=[0])
    kept = [i for i, t in enumerate(tokens) if not t["special"]]
    square = half_maps(live_server, TEXT, layers=[0], heads=[0])[0, 0].astype(np.float64)[np.ix_(kept, kept)]
    expected = (square / square.sum(axis=1, keepdims=True)).astype(np.float32)  # (m, m)
    assert watched.page.get_attribute(".panel canvas", "data-tokens") == str(len(kept))
    hover_cell(watched, 0, 1)  # the first and second tokens left: [CLS] is hidden
    shown = watched.readout()
    assert (shown["query"], shown["key"]) == (str(kept[0]), str(kept[1]))
    assert float(shown["value"]) == pytest.approx(float(expected[0, 1]), rel=1e-6)
    watched.assert_clean()


def test_all_heads_grid_opens_a_head_in_the_heatmap(watched: Watched, live_server: str) -> None:
    watched.open(live_server)
    watched.run(TEXT)
    watched.page.focus("#tab-heatmap")
    watched.page.keyboard.press("ArrowRight")  # tabs follow the arrow keys
    watched.wait_for("grid", panel_text=TEXT)
    grid = watched.page.locator(".panel canvas").first
    assert (grid.get_attribute("data-layers"), grid.get_attribute("data-heads")) == ("2", "2")
    watched.shot("grid")
    box = grid.bounding_box()
    assert box is not None
    left, thumb, gap = (number(grid, name) for name in ("left", "thumb", "gap"))
    watched.page.mouse.click(box["x"] + left + 0.5 * thumb, box["y"] + left + 1.5 * thumb + gap)  # layer 1, head 0
    watched.wait_for("heatmap", "layer 1 · head 0", TEXT)
    assert watched.page.get_attribute("#tab-heatmap", "aria-selected") == "true"

    watched.page.click("#tab-grid")
    watched.wait_for("grid", panel_text=TEXT)
    grid.focus()
    watched.page.keyboard.press("ArrowRight")
    watched.page.keyboard.press("Enter")
    watched.wait_for("heatmap", "layer 1 · head 1", TEXT)
    watched.assert_clean()


def test_lines_view_highlights_a_tokens_lines(watched: Watched, live_server: str) -> None:
    watched.open(live_server)
    watched.run(TEXT)
    watched.page.click("#tab-lines")
    watched.wait_for("lines", "layer 0 · head 0", TEXT)
    canvas = watched.page.locator(".panel canvas").first
    box = canvas.bounding_box()
    assert box is not None
    top, row = number(canvas, "top"), number(canvas, "row")
    watched.page.mouse.move(box["x"] + 10, box["y"] + top + 2.5 * row)  # query 2, left column
    shown = watched.readout()
    row_2 = half_maps(live_server, TEXT, layers=[0], heads=[0])[0, 0, 2]
    assert (shown["side"], shown["token"]) == ("query", "2")
    assert float(shown["value"]) == float(row_2.max()) == float(row_2[int(shown["partner"])])
    watched.shot("lines")
    canvas.focus()
    watched.page.keyboard.press("ArrowRight")  # the same token, on the key side
    assert watched.readout()["side"] == "key"
    watched.assert_clean()


def test_two_texts_side_by_side(watched: Watched, live_server: str) -> None:
    watched.open(live_server)
    watched.run(TEXT, OTHER)
    labels = httpx.post(f"{live_server}/classify", json={"inputs": [TEXT, OTHER]}).json()
    assert (watched.answer_label(TEXT), watched.answer_label(OTHER)) == (labels[0][0]["label"], labels[1][0]["label"])
    assert watched.page.locator(".panel").count() == 2 and watched.page.locator(".answer").count() == 2
    tokens, _ = attention(live_server, OTHER)
    assert watched.page.get_attribute(".panel >> nth=1 >> canvas", "data-tokens") == str(len(tokens))
    watched.shot("compare")
    watched.assert_clean()


def test_a_text_past_the_max_length_is_cut_and_drawn(watched: Watched, live_server: str) -> None:
    long = " ".join(["the plot makes no sense and nothing happens for two hours"] * 12)
    watched.open(live_server)
    watched.run(long)
    note = watched.page.inner_text(".panel .note")
    assert note.startswith("64 tokens; cut at character"), note
    watched.page.click("#tab-grid")
    watched.wait_for("grid", panel_text=long)
    watched.page.click("#tab-lines")
    watched.wait_for("lines", panel_text=long)
    watched.assert_clean()


def test_export_png_and_json(watched: Watched, live_server: str, tmp_path: Path) -> None:
    watched.open(live_server)
    watched.run(TEXT)
    with watched.page.expect_download() as png_download:
        watched.page.click("#export-png")
    png = Path(png_download.value.path()).read_bytes()
    width = int(watched.page.get_attribute(".panel canvas", "width") or 0)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == width
    with watched.page.expect_download() as json_download:
        watched.page.click("#export-json")
    exported = json.loads(Path(json_download.value.path()).read_text())
    assert exported["encoding"] == "base64" and exported["dtype"] == "float16"
    item = exported["data"][0]
    halves = np.frombuffer(base64.b64decode(item["attention"]), dtype="<f2").reshape(item["shape"])
    assert np.array_equal(halves, half_maps(live_server, TEXT, layers=[0], heads=[0]))
    watched.assert_clean()


def test_float16_decoding_matches_numpy(watched: Watched, live_server: str) -> None:
    """Every one of the 65,536 half-float bit patterns, by Float16Array and by the fallback table, returned
    as the bytes of the Float32Array the page would draw from."""
    watched.open(live_server)
    decoded = watched.page.evaluate("""async () => {
        const { halvesToFloats } = await import("/explore/half.js");
        const bits = new Uint16Array(65536).map((_, i) => i);
        const asBase64 = (floats) => {
            const bytes = new Uint8Array(floats.buffer);
            let text = "";
            for (let i = 0; i < bytes.length; i += 8192) text += String.fromCharCode(...bytes.subarray(i, i + 8192));
            return btoa(text);
        };
        const bytes = new Uint8Array(bits.buffer);
        return [asBase64(halvesToFloats(bytes, true)), asBase64(halvesToFloats(bytes, false))];
    }""")
    expected = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    for text in decoded:
        assert np.array_equal(np.frombuffer(base64.b64decode(text), dtype="<f4"), expected, equal_nan=True)
    watched.page.fill("#text-a", TEXT)
    watched.page.click("#run")
    watched.wait_for(panel_text=TEXT)
    watched.assert_clean()


class FullLengthModel(http.server.ThreadingHTTPServer):
    """Answers /attention as a MiniLM-shaped model would at its full length (6 layers x 12 heads, 256 tokens):
    seeded random rows that sum to 1, sliced like the server slices. A plain HTTP server on 127.0.0.1 that the
    page's /attention requests are sent on to (12 MB answers through Playwright's fulfil take many seconds).
    The tiny bundle's graphs stop at 64 tokens; this checks the page's side at the default model's size."""

    layers, heads, n = 6, 12, 256

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        weights = np.random.default_rng(0).random((self.layers, self.heads, self.n, self.n), dtype=np.float32) ** 8
        self.maps = (weights / weights.sum(axis=-1, keepdims=True)).astype(np.float16)  # (L, H, n, n)
        special = {0, self.n - 1}
        self.tokens = [{"id": i, "text": "[CLS]" if i == 0 else "[SEP]" if i == self.n - 1 else f"w{i}",
                        "start": 0, "stop": 0, "special": i in special} for i in range(self.n)]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def answer(self, body: dict[str, Any]) -> bytes:
        assert body["encoding"] == "base64" and body["dtype"] == "float16" and body.get("aggregation", "none") == "none"
        chosen = self.maps[body.get("layers", slice(None))][:, body.get("heads", slice(None))]  # (l, h, n, n)
        item = {"tokens": self.tokens, "shape": list(chosen.shape),
                "attention": base64.b64encode(np.ascontiguousarray(chosen, "<f2").tobytes()).decode()}
        return json.dumps({"model": "full-length", "aggregation": "none", "encoding": "base64", "dtype": "float16",
                           "data": [item] * len(body["inputs"])}).encode()

    def info(self, route: Route) -> None:
        model = {"model": "full-length", "num_layers": self.layers, "num_heads": self.heads, "max_length": self.n,
                 "labels": ["neg", "pos"], "variants": {"fast": "fp32", "attention": "fp32"}}
        limits = {"max_input_chars": 20000}
        route.fulfill(json={**model, "models": [{"name": "full-length", **model}], "limits": limits})

    def attention(self, route: Route) -> None:
        route.continue_(url=f"http://127.0.0.1:{self.server_address[1]}/attention")


class _Answer(http.server.BaseHTTPRequestHandler):
    server: FullLengthModel

    def do_POST(self) -> None:  # noqa: N802  (the stdlib's name)
        body = self.server.answer(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def full_length_model() -> Iterator[FullLengthModel]:
    model = FullLengthModel()
    yield model
    model.shutdown()
    model.server_close()


def test_maps_at_the_default_models_full_length_draw_in_every_view(
    watched: Watched, live_server: str, full_length_model: FullLengthModel,
) -> None:
    model = full_length_model
    watched.page.route("**/info", model.info)
    watched.page.route("**/attention", model.attention)
    watched.open(live_server)
    watched.run(TEXT)
    watched.page.select_option("#layer", "5")
    watched.page.select_option("#head", "11")
    watched.wait_for("heatmap", "layer 5 · head 11", TEXT)
    hover_cell(watched, 200, 100)
    shown = watched.readout()
    assert (shown["query"], shown["key"]) == ("200", "100")
    assert float(shown["value"]) == float(model.maps[5, 11, 200, 100])
    watched.page.click("#tab-grid")
    watched.wait_for("grid", panel_text=TEXT)
    grid = watched.page.locator(".panel canvas").first
    assert (grid.get_attribute("data-layers"), grid.get_attribute("data-heads")) == ("6", "12")
    watched.page.click("#tab-lines")
    watched.wait_for("lines", "layer 5 · head 11", TEXT)
    watched.page.locator(".panel canvas").first.focus()
    watched.page.keyboard.press("ArrowDown")
    row = model.maps[5, 11, 0].astype(np.float32)
    assert float(watched.readout()["value"]) == float(row.max())
    watched.assert_clean()


KEY = "explorer-test-key-0123"


@pytest.fixture(scope="module")
def guarded_server(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A server that needs a key, takes at most 400 characters per text and caps /attention answers at 8 kB
    (the example text's map fits; a 64-token one does not)."""
    flags = ("--api-key", KEY, "--max-input-chars", "400", "--attention-cap-bytes", "8000")
    with running(tiny_bundle, tmp_path_factory.mktemp("guarded") / "server.log", *flags) as server:
        yield server.url
    assert server.proc.returncode == 0, server.log()


def test_key_and_errors_appear_on_the_page(watched: Watched, guarded_server: str) -> None:
    page = watched.page
    watched.open(guarded_server)
    assert page.is_visible("#key-form") and "API key" in page.inner_text("#message")
    assert page.get_attribute("#views", "data-state") == "error" and page.is_visible("h1")
    page.fill("#api-key", KEY)
    page.click("#key-form button")
    watched.wait_for(panel_text=page.input_value("#text-a"))
    assert page.is_hidden("#message") and page.is_hidden("#key-form")
    api = [r for r in watched.requests if r.url.endswith(("/attention", "/classify"))]
    assert api and all(r.headers.get("authorization") == f"Bearer {KEY}" for r in api)

    sent = len(watched.requests)
    page.fill("#text-a", "x" * 401)
    page.click("#run")
    wait_for_message(watched, "at most 400")
    assert len(watched.requests) == sent  # refused before sending

    page.fill("#text-a", " ".join(["the plot makes no sense"] * 12))
    page.click("#run")
    wait_for_message(watched, "over the cap")
    assert page.get_attribute("#views", "data-state") == "error" and page.is_visible("h1")
    watched.assert_clean(expected_statuses=(401, 422))
