"""The explorer's task picker, in Chromium against a real server of two models:

    jina    the task bundle (tests.helpers.tasks): three LoRA adapters, retrieval.passage among them on q/k/v, so
            its attention maps are not the base's (the default: listed first)
    tiny    the tiny bundle: no adapters

The page's drawn values (its read-out, walked along a row with the arrow keys) are compared with /attention's
answer for the same model and task, fetched here with httpx, and with the bare base's, which they must not be; the
requests the page sent are read from the browser; the task travels in the page's link as the model does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import numpy as np
import pytest

from tests.browser.watch import WAIT_MS, Watched, bodies, half_maps, options
from tests.helpers.process import running
from tests.helpers.tasks import TASKS

TEXT = "The quick brown fox jumps over the lazy dog 123 times."
TASK = "retrieval.passage"  # adapts the query, key and value projections: every map moves
ROW = 1  # the query whose row the read-out walks


@pytest.fixture(scope="module")
def two_models(task_bundle: Path, tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("tasks") / "server.log"
    with running(task_bundle, log, "--bundle", f"tiny={tiny_bundle}") as server:
        yield server.url
    assert server.proc.returncode == 0, server.log()





def wait_drawn(watched: Watched, model: str, task: str, title: str) -> None:
    """Until the heatmap of TEXT is drawn for this model and task ("": the base) under this map title."""
    quoted = {name: json.dumps(value, ensure_ascii=False) for name, value in
              (("model", model), ("task", task), ("title", title), ("text", TEXT))}
    selector = (f"#views[data-state=ready][data-view=heatmap][data-model={quoted['model']}][data-task={quoted['task']}]"
                f"[data-title={quoted['title']}] .panel[data-text={quoted['text']}]")
    watched.page.wait_for_selector(selector, timeout=WAIT_MS)


def drawn_row(watched: Watched, row: int) -> np.ndarray:
    """The values the heatmap's read-out shows along query `row`, key 0 to the last, moved to by the arrow keys."""
    page = watched.page
    canvas = page.locator(".panel canvas").first
    count = int(canvas.get_attribute("data-tokens") or 0)
    canvas.focus()
    page.keyboard.press("Home")
    for _ in range(row - int(watched.readout()["query"])):
        page.keyboard.press("ArrowDown")
    values = []
    for key in range(count):
        shown = watched.readout()
        assert (shown["query"], shown["key"]) == (str(row), str(key)), shown
        values.append(float(shown["value"]))
        page.keyboard.press("ArrowRight")
    return np.array(values, dtype=np.float32)


def kept_link(watched: Watched) -> dict[str, list[str]]:
    return parse_qs(urlsplit(watched.page.url).query)


def test_a_task_redraws_the_maps_with_its_adapter(watched: Watched, two_models: str) -> None:
    page = watched.page
    page.goto(f"{two_models}/explore?{urlencode({'text': TEXT})}")
    wait_drawn(watched, "jina", "", "layer 0 · head 0")
    assert page.is_visible("#task-box") and options(watched, "#task") == ["", *TASKS]
    assert page.input_value("#task") == "" and "tasks: retrieval.query, retrieval.passage, text-matching" in (
        page.inner_text("#model-info"))
    base = half_maps(two_models, TEXT, model="jina", layers=[0], heads=[0])[0, 0]  # (n, n)
    assert np.array_equal(drawn_row(watched, ROW), base[ROW])

    sent = len(watched.requests)
    page.select_option("#task", TASK)
    wait_drawn(watched, "jina", TASK, f"layer 0 · head 0 · task {TASK}")
    tasked = half_maps(two_models, TEXT, model="jina", task=TASK, layers=[0], heads=[0])[0, 0]  # (n, n)
    assert np.abs(tasked[ROW].astype(np.float32) - base[ROW]).max() > 1e-3  # the adapter moves this row
    assert np.array_equal(drawn_row(watched, ROW), tasked[ROW])  # the page's float16 decoding, exactly
    asked = bodies(watched, "/attention", sent)
    assert asked and all(body["task"] == TASK and body["model"] == "jina" for body in asked), asked
    assert kept_link(watched) == {"text": [TEXT], "model": ["jina"], "task": [TASK]}, page.url
    watched.shot("task")
    page.select_option("#head", "1")
    wait_drawn(watched, "jina", TASK, f"layer 0 · head 1 · task {TASK}")
    head_1 = half_maps(two_models, TEXT, model="jina", task=TASK, layers=[0], heads=[1])[0, 0]
    assert np.array_equal(drawn_row(watched, ROW), head_1[ROW])

    page.goto(page.url)  # the kept link opens the same run: the task chosen, its maps drawn
    wait_drawn(watched, "jina", TASK, f"layer 0 · head 0 · task {TASK}")
    assert page.input_value("#task") == TASK and page.is_hidden("#message")
    assert np.array_equal(drawn_row(watched, ROW), tasked[ROW])

    page.select_option("#task", "")  # back to the bare base
    wait_drawn(watched, "jina", "", "layer 0 · head 0")
    assert np.array_equal(drawn_row(watched, ROW), base[ROW])
    assert "task" not in bodies(watched, "/attention")[-1] and "task" not in kept_link(watched)
    watched.assert_clean()


def test_the_picker_is_hidden_for_a_model_without_adapters(watched: Watched, two_models: str) -> None:
    page = watched.page
    page.goto(f"{two_models}/explore?{urlencode({'text': TEXT, 'task': TASK})}")
    wait_drawn(watched, "jina", TASK, f"layer 0 · head 0 · task {TASK}")

    sent = len(watched.requests)
    page.select_option("#model", "tiny")
    wait_drawn(watched, "tiny", "", "layer 0 · head 0")
    assert page.is_hidden("#task-box") and "tasks:" not in page.inner_text("#model-info")
    asked = bodies(watched, "/attention", sent) + bodies(watched, "/classify", sent)
    assert asked and all("task" not in body and body["model"] == "tiny" for body in asked), asked
    assert "task" not in kept_link(watched)
    tiny = half_maps(two_models, TEXT, model="tiny", layers=[0], heads=[0])[0, 0]
    assert np.array_equal(drawn_row(watched, ROW), tiny[ROW])

    page.select_option("#model", "jina")  # tiny had no task to keep: jina comes back as the base
    wait_drawn(watched, "jina", "", "layer 0 · head 0")
    assert page.is_visible("#task-box") and page.input_value("#task") == ""

    page.goto(f"{two_models}/explore?{urlencode({'text': TEXT, 'model': 'tiny', 'task': TASK})}")
    wait_drawn(watched, "tiny", "", "layer 0 · head 0")
    assert page.is_hidden("#task-box")
    assert f'names the task "{TASK}", which tiny does not have; showing the base model' in page.inner_text("#message")
    watched.assert_clean()
