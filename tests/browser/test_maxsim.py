"""The explorer's MaxSim view, in Chromium against a real server of two models:

    m3      a random bge-m3 (tests.helpers.bge_m3, tiny, exported fp32): token vectors and token weights (the default)
    pylate  a random PyLate ColBERT (tests.helpers.colbert, tiny): [Q] / [D] markers, [MASK] query expansion, the
            sum of the row maxima, no token weights
    plain   the tiny plain bundle: no token vectors, so no MaxSim view

What the page draws is read from the page (its read-out, walked over every cell with the arrow keys, and the score
line's data attributes) and compared with POST /maxsim's answer for the same pair, fetched here with httpx (the
route itself is checked against BGEM3FlagModel in tests/service/test_multivector_routes.py); the requests the page
sent are read from the browser; the pair travels in the page's link.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import numpy as np
import pytest

from tests.browser.watch import WAIT_MS, Watched, bodies
from tests.helpers import bge_m3, colbert
from tests.helpers.process import running

QUERY, DOCUMENT = bge_m3.QUERY, bge_m3.DOCUMENT
OTHER_QUERY, OTHER_DOCUMENT = "the lazy dog", "dog dog dog the the lazy dog"
M3 = "m3"


@pytest.fixture(scope="module")
def served(tiny_plain_bundle: Path, bge_m3_tiny: tuple[Path, Path], colbert_tiny: dict[str, Any],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """bge-m3 (as "m3", the default), the plain bundle and PyLate's ColBERT, the session's bundles."""
    log = tmp_path_factory.mktemp("maxsim-view") / "server.log"
    first = Path(f"{M3}={bge_m3_tiny[1]}")  # NAME=DIR, as --bundle takes it
    with running(first, log, "--bundle", f"plain={tiny_plain_bundle}",
                 "--bundle", f"pylate={colbert_tiny['pylate_bundle']}") as server:
        yield server.url
    assert server.proc.returncode == 0, server.log()


def maxsim(base_url: str, query: str, document: str, model: str = M3) -> dict[str, Any]:
    response = httpx.post(f"{base_url}/maxsim", json={"query": query, "document": document, "model": model},
                          timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def wait_maxsim(watched: Watched, query: str, document: str) -> None:
    watched.page.wait_for_function(
        "([q, d]) => { const v = document.getElementById('maxsim').dataset;"
        " return v.state === 'ready' && v.query === q && v.document === d; }", arg=[query, document], timeout=WAIT_MS)


def shown_cell(watched: Watched) -> dict[str, str]:
    return watched.page.locator("#maxsim-readout").evaluate("n => ({text: n.textContent, ...n.dataset})")


# Every cell's read-out, walked in the page by the canvas's own key handling (keydown events on the canvas): one
# round trip for the map, where a Playwright key press per cell takes ~30 ms (a 25 x 45 map: 35 s).
WALK = """canvas => {
  const readout = document.getElementById("maxsim-readout");
  const press = (key) => canvas.dispatchEvent(new KeyboardEvent("keydown", {key, cancelable: true}));
  const rows = Number(canvas.dataset.rows), cols = Number(canvas.dataset.cols), cells = [];
  for (let row = 0; row < rows; row++) press("ArrowUp");
  for (let row = 0; row < rows; row++) {
    press("Home");
    for (let col = 0; col < cols; col++) {
      cells.push({text: readout.textContent, ...readout.dataset});
      press("ArrowRight");
    }
    press("ArrowDown");
  }
  return cells;
}"""


def drawn_map(watched: Watched) -> tuple[np.ndarray, list[list[bool]], list[dict[str, str]]]:
    """Every cell the read-out shows, row by row: the values, whether each is marked as its row's best match, and
    the cells' read-outs (for the tokens' weights). The keyboard is checked first with real key presses."""
    page = watched.page
    canvas = page.locator("#maxsim canvas")
    rows, cols = int(canvas.get_attribute("data-rows") or 0), int(canvas.get_attribute("data-cols") or 0)
    canvas.focus()
    for key, cell in (("Home", (0, 0)), ("ArrowDown", (1, 0)), ("ArrowRight", (1, 1)), ("End", (1, cols - 1))):
        page.keyboard.press(key)
        assert (shown_cell(watched)["query"], shown_cell(watched)["key"]) == tuple(map(str, cell)), key
    cells = canvas.evaluate(WALK)
    assert [(c["query"], c["key"]) for c in cells] == [(str(r), str(c)) for r in range(rows) for c in range(cols)]
    values = np.array([float(c["value"]) for c in cells]).reshape(rows, cols)
    marked = [[c["best"] == "true" for c in cells[r * cols:(r + 1) * cols]] for r in range(rows)]
    return values, marked, cells


def check_drawn(watched: Watched, answer: dict[str, Any], reduction: str = "mean", weighted: bool = True) -> None:
    """The page's map, marks, score and weights (bge-m3's; none for a model without token weights) are /maxsim's
    answer, reduced by `reduction`."""
    similarities = np.asarray(answer["similarities"])
    values, marked, cells = drawn_map(watched)
    assert values.shape == similarities.shape and values.shape[0] > 1 and values.shape[1] > 1
    assert np.array_equal(values, similarities)  # the JSON numbers, exactly
    assert [row.index(True) for row in marked] == answer["best"] == similarities.argmax(axis=1).tolist()
    assert all(sum(row) == 1 for row in marked)
    score = watched.page.locator("#maxsim-score")
    assert float(score.get_attribute("data-score") or "nan") == answer["score"]
    assert score.get_attribute("data-reduction") == answer["reduction"] == reduction  # bge-m3 averages, ColBERT sums
    rows = len(answer["best"])
    assert f"Score {answer['score']:.4f}: the {reduction} of the {rows} query tokens" in score.inner_text()
    reduce = np.mean if reduction == "mean" else np.sum
    assert answer["score"] == pytest.approx(reduce(similarities.max(axis=1)), abs=1e-5)
    label = watched.page.locator("#maxsim canvas").get_attribute("aria-label") or ""
    if not weighted:
        assert all(c["queryWeight"] == c["keyWeight"] == "" and "weight" not in c["text"] for c in cells)
        assert "weight" not in label
        return
    cols = similarities.shape[1]
    for row, token in enumerate(answer["query_tokens"]):
        assert token["weight"] is not None and float(cells[row * cols]["queryWeight"]) == token["weight"]
        assert f"“{token['token']}” (weight {token['weight']:.4f})" in cells[row * cols]["text"]
    for col, token in enumerate(answer["document_tokens"]):
        assert float(cells[col]["keyWeight"]) == token["weight"]
    assert "weight is the bar beside its label" in label


def kept_link(watched: Watched) -> dict[str, list[str]]:
    return parse_qs(urlsplit(watched.page.url).query)


def test_the_view_draws_the_routes_map(watched: Watched, served: str) -> None:
    page = watched.page
    page.goto(f"{served}/explore?{urlencode({'query': QUERY, 'document': DOCUMENT})}")  # a link's pair, run
    wait_maxsim(watched, QUERY, DOCUMENT)
    assert page.is_visible("#maxsim-box") and "token vectors: MaxSim below" in page.inner_text("#model-info")
    check_drawn(watched, maxsim(served, QUERY, DOCUMENT))
    watched.shot("maxsim")

    page.fill("#maxsim-query", OTHER_QUERY)
    page.fill("#maxsim-document", OTHER_DOCUMENT)
    page.click("#maxsim-run")
    wait_maxsim(watched, OTHER_QUERY, OTHER_DOCUMENT)
    check_drawn(watched, maxsim(served, OTHER_QUERY, OTHER_DOCUMENT))
    assert bodies(watched, "/maxsim")[-1] == {"query": OTHER_QUERY, "document": OTHER_DOCUMENT, "model": M3}
    link = kept_link(watched)
    assert (link["query"], link["document"], link["model"]) == ([OTHER_QUERY], [OTHER_DOCUMENT], [M3]), page.url

    page.goto(page.url)  # the kept link draws the same pair
    wait_maxsim(watched, OTHER_QUERY, OTHER_DOCUMENT)
    assert page.input_value("#maxsim-query") == OTHER_QUERY and page.input_value("#maxsim-document") == OTHER_DOCUMENT
    watched.assert_clean()


def test_a_colbert_model_sums_and_shows_its_markers(watched: Watched, served: str) -> None:
    page = watched.page
    query, document = colbert.QUERIES[1], colbert.DOCUMENTS[0]  # a query shorter than its length: expanded
    page.goto(f"{served}/explore?{urlencode({'query': query, 'document': document, 'model': 'pylate'})}")
    wait_maxsim(watched, query, document)
    assert page.get_attribute("#maxsim", "data-model") == "pylate"
    answer = maxsim(served, query, document, model="pylate")
    tokens = [t["token"] for t in answer["query_tokens"]]
    assert "[MASK]" in tokens and tokens[1].lower().startswith("[q]"), tokens  # the marker and expansion, as rows
    check_drawn(watched, answer, reduction="sum", weighted=False)
    watched.assert_clean()


def test_the_view_is_absent_for_a_plain_model(watched: Watched, served: str) -> None:
    page = watched.page
    page.goto(f"{served}/explore?{urlencode({'query': QUERY, 'document': DOCUMENT})}")
    wait_maxsim(watched, QUERY, DOCUMENT)
    sent = len(watched.requests)
    page.select_option("#model", "plain")
    watched.wait_for(model="plain")
    assert page.is_hidden("#maxsim-box") and "MaxSim" not in page.inner_text("#model-info")
    assert page.get_attribute("#maxsim", "data-state") == "idle" and page.locator("#maxsim canvas").count() == 0
    assert not bodies(watched, "/maxsim", sent) and "query" not in kept_link(watched)

    sent = len(watched.requests)
    page.goto(f"{served}/explore?{urlencode({'model': 'plain', 'query': QUERY, 'document': DOCUMENT})}")
    watched.wait_for(model="plain")
    assert page.is_hidden("#maxsim-box") and not bodies(watched, "/maxsim", sent)
    watched.assert_clean()
