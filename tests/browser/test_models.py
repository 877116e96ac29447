"""The explorer follows the model chosen, in Chromium against a real server of three different models:

    tiny    the tiny bundle: 2 layers x 2 heads, labels neg/pos (the default: listed first)
    wide    3 layers x 4 heads, no classification head (no labels)
    blind   the tiny bundle without its attention graph (labels, but /attention refuses it)

The layer and head pickers, the model's line and the labels are read from the page; the requests the page sent
are read from the browser (their JSON bodies); the value the page shows is compared with /attention's answer
for the same model, fetched here with httpx.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from export.bundle import export_bundle
from tests.browser.watch import Watched, bodies, half_maps, options
from tests.helpers.process import running
from tests.helpers.tiny import make_tiny_checkpoint

TEXT = "the acting is wooden but the soundtrack is wonderful"


@pytest.fixture(scope="module")
def wide_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model of another shape and no head: 3 layers x 4 heads (32 / 4 = 8 per head), no labels."""
    root = tmp_path_factory.mktemp("wide")
    checkpoint = make_tiny_checkpoint(root / "checkpoint", head=False, num_layers=3, num_heads=4)
    export_bundle(checkpoint, root / "bundle", name="wide")
    return root / "bundle"


@pytest.fixture(scope="module")
def blind_bundle(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny bundle less its attention graph (a bundle may have none: the server then serves no attention)."""
    bundle = Path(shutil.copytree(tiny_bundle, tmp_path_factory.mktemp("blind") / "bundle"))
    manifest = json.loads((bundle / "manifest.json").read_text())
    for graph in [g for g in manifest["graphs"] if g["kind"] == "attention"]:
        (bundle / graph["file"]).unlink()
        manifest["graphs"].remove(graph)
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return bundle


@pytest.fixture(scope="module")
def three_models(
    tiny_bundle: Path, wide_bundle: Path, blind_bundle: Path, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    flags = ("--bundle", f"wide={wide_bundle}", "--bundle", f"blind={blind_bundle}")
    with running(tiny_bundle, tmp_path_factory.mktemp("three") / "server.log", *flags) as server:
        yield server.url
    assert server.proc.returncode == 0, server.log()





def choose_model(watched: Watched, name: str) -> int:
    """Pick a model; returns how many requests the page had sent before (to read only the ones after)."""
    sent = len(watched.requests)
    watched.page.select_option("#model", name)
    return sent


def test_the_pickers_labels_and_requests_follow_the_chosen_model(watched: Watched, three_models: str) -> None:
    page = watched.page
    watched.open(three_models)
    watched.run(TEXT)
    assert page.is_visible("#model-box") and options(watched, "#model") == ["tiny", "wide", "blind"]
    assert (options(watched, "#layer"), options(watched, "#head")) == (["0", "1"], ["0", "1"])
    assert page.inner_text("#model-info") == "tiny · 2 layers × 2 heads · up to 64 tokens · labels: neg, pos"
    assert watched.answer_label(TEXT) in ("neg", "pos")
    page.select_option("#layer", "1")
    page.select_option("#head", "1")
    watched.wait_for("heatmap", "layer 1 · head 1", TEXT, model="tiny")

    sent = choose_model(watched, "wide")
    watched.wait_for("heatmap", "layer 1 · head 1", TEXT, model="wide")  # the layer and head chosen: wide has them
    assert (options(watched, "#layer"), options(watched, "#head")) == (["0", "1", "2"], ["0", "1", "2", "3"])
    assert page.inner_text("#model-info") == "wide · 3 layers × 4 heads · up to 64 tokens · no classification head"
    assert "wide has no classification head" in page.inner_text("#answers")
    assert page.locator(".answer").count() == 0 and not bodies(watched, "/classify", sent)
    page.select_option("#layer", "2")
    page.select_option("#head", "3")  # a head tiny does not have
    watched.wait_for("heatmap", "layer 2 · head 3", TEXT, model="wide")
    asked = bodies(watched, "/attention", sent)
    assert asked and all(body["model"] == "wide" for body in asked), asked
    assert asked[-1]["layers"] == [2] and asked[-1]["heads"] == [3]
    page.locator(".panel canvas").first.focus()
    for key in ("ArrowDown", "ArrowDown", "ArrowRight", "ArrowRight", "ArrowRight"):
        page.keyboard.press(key)
    shown = watched.readout()
    assert (shown["query"], shown["key"]) == ("2", "3")
    halves = half_maps(three_models, TEXT, layers=[2], heads=[3], model="wide")  # (1, 1, n, n)
    assert float(shown["value"]) == float(halves[0, 0, 2, 3])
    page.click("#tab-grid")
    watched.wait_for("grid", panel_text=TEXT, model="wide")
    grid = page.locator(".panel canvas").first
    assert (grid.get_attribute("data-layers"), grid.get_attribute("data-heads")) == ("3", "4")
    watched.shot("grid-wide")

    sent = choose_model(watched, "tiny")
    watched.wait_for("grid", panel_text=TEXT, model="tiny")
    assert (grid.get_attribute("data-layers"), grid.get_attribute("data-heads")) == ("2", "2")
    assert (options(watched, "#layer"), options(watched, "#head")) == (["0", "1"], ["0", "1"])
    assert (page.input_value("#layer"), page.input_value("#head")) == ("1", "1")  # kept within tiny's
    assert page.inner_text("#model-info") == "tiny · 2 layers × 2 heads · up to 64 tokens · labels: neg, pos"
    top_label = httpx.post(f"{three_models}/classify", json={"inputs": TEXT, "model": "tiny"}).json()[0][0]["label"]
    assert watched.answer_label(TEXT) == top_label
    asked = bodies(watched, "/attention", sent) + bodies(watched, "/classify", sent)
    assert len(asked) == 2 and all(body["model"] == "tiny" for body in asked), asked
    page.click("#tab-heatmap")
    watched.wait_for("heatmap", "layer 1 · head 1", TEXT, model="tiny")
    watched.assert_clean()


def test_a_model_without_an_attention_graph_shows_its_labels_and_a_note(watched: Watched, three_models: str) -> None:
    page = watched.page
    watched.open(three_models)
    sent = choose_model(watched, "blind")
    page.wait_for_selector("#views[data-state=unavailable][data-model=blind]")
    assert "blind has no attention graph" in page.inner_text("#views")
    assert page.locator(".panel").count() == 0 and page.is_hidden("#message")
    assert page.inner_text("#model-info").endswith("labels: neg, pos · no attention graph")
    text = page.input_value("#text-a")
    top_label = httpx.post(f"{three_models}/classify", json={"inputs": text, "model": "blind"}).json()[0][0]["label"]
    assert watched.answer_label(text) == top_label
    assert [body["model"] for body in bodies(watched, "/classify", sent)] == ["blind"]
    assert not bodies(watched, "/attention", sent)
    assert all(page.is_disabled(f"#{id}") for id in ("layer", "head", "combine", "export-png", "export-json"))

    choose_model(watched, "tiny")
    watched.wait_for("heatmap", "layer 0 · head 0", text, model="tiny")
    assert page.is_enabled("#layer") and page.is_enabled("#export-png")
    watched.assert_clean()


def test_a_link_opens_with_its_texts_run_on_its_model(watched: Watched, three_models: str) -> None:
    """/explore?text=...&compare=...&model=... runs those texts on that model as the page opens, and the address the
    page keeps after a run is such a link; a model the server does not serve is said, not silently swapped."""
    page, second = watched.page, "a second text, with é and & in it"
    link = f"{three_models}/explore?{urlencode({'text': TEXT, 'compare': second, 'model': 'wide'})}"
    page.goto(link)
    watched.wait_for("heatmap", panel_text=second, model="wide")
    assert (page.input_value("#text-a"), page.input_value("#text-b"), page.input_value("#model")) == (
        TEXT, second, "wide")
    assert page.is_checked("#compare") and page.is_visible("#text-b-box")
    assert [b["inputs"] for b in bodies(watched, "/attention")][-1] == [TEXT, second]

    choose_model(watched, "tiny")
    watched.wait_for("heatmap", panel_text=second, model="tiny")
    kept = parse_qs(urlsplit(page.url).query)
    assert kept == {"text": [TEXT], "compare": [second], "model": ["tiny"]}, page.url

    page.goto(f"{three_models}/explore?{urlencode({'text': 'only this', 'model': 'nobody'})}")
    watched.wait_for(panel_text="only this", model="tiny")
    assert 'names the model "nobody", which this server does not serve; showing tiny' in page.inner_text("#message")
    watched.assert_clean()
