// The three views of the texts last run: what each asks /attention for (only the layers and heads it shows,
// as base64 float16), the panels (one per text, side by side), and which drawing module draws them.

import { call, withModel } from "./api.js";
import { Grid } from "./grid.js";
import { Heatmap } from "./heatmap.js";
import { Lines } from "./lines.js";
import { decodeItem, viewOf } from "./matrix.js";

const cache = new Map(); // request body (JSON) -> {items, text}; the last few answers
const CACHE_SIZE = 6;

// The /attention request body a view needs. Heatmap and lines: one map (a head, or the heads combined,
// of one layer; or the rollout). The grid: every layer and head.
export function attentionBody(settings, texts) {
  const body = { inputs: texts, encoding: "base64", dtype: "float16" };
  if (settings.view === "grid") return body;
  if (settings.combine === "rollout") return { ...body, aggregation: "rollout" };
  if (settings.combine === "none") return { ...body, layers: [settings.layer], heads: [settings.head] };
  return { ...body, layers: [settings.layer], aggregation: settings.combine };
}

export async function fetchAttention(body, facts) {
  const request = withModel(body, facts.model, facts.modelCount);
  const key = JSON.stringify(request);
  if (!cache.has(key)) {
    const { json, text } = await call("/attention", request);
    cache.set(key, { items: json.data.map(decodeItem), text });
    if (cache.size > CACHE_SIZE) cache.delete(cache.keys().next().value);
  }
  return cache.get(key);
}

export function mapTitle(settings, facts) {
  if (settings.combine === "rollout") return `rollout over ${facts.numLayers} layers`;
  if (settings.combine === "none") return `layer ${settings.layer} · head ${settings.head}`;
  return `layer ${settings.layer} · ${settings.combine} over heads`;
}

// Empties `container` and adds one panel per text: a heading, a note, a scrolling figure, a read-out.
export function makePanels(container, texts, items, hideSpecial) {
  container.replaceChildren();
  return texts.map((text, i) => {
    const panel = element("div", "panel");
    panel.dataset.text = text;
    const heading = element("h2", "", texts.length > 1 ? `Text ${i + 1}` : "Text");
    const note = element("p", "note", tokenNote(text, items[i].tokens, hideSpecial));
    const figure = element("div", "figure");
    const readout = element("div", "readout");
    readout.setAttribute("aria-live", "polite");
    panel.append(heading, note, figure, readout);
    container.append(panel);
    return { panel, figure, readout };
  });
}

function tokenNote(text, tokens, hideSpecial) {
  const plain = tokens.filter((t) => !t.special);
  const shown = hideSpecial ? ` (${plain.length} shown: special tokens hidden)` : "";
  const last = plain.at(-1);
  const cut = last && last.stop < text.trimEnd().length ? `; cut at character ${last.stop} (the model's max length)` : "";
  return `${tokens.length} tokens${shown}${cut}`;
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// Draws the view into each panel; returns the drawing objects (each has a .canvas).
export function draw(settings, facts, answer, panels, onPick) {
  const options = { hideSpecial: settings.hideSpecial, renormalise: settings.renormalise };
  const title = mapTitle(settings, facts);
  return panels.map(({ figure, readout }, i) => {
    const item = answer.items[i];
    const width = Math.max(figure.clientWidth - 4, 240);
    if (settings.view === "grid") {
      const grid = new Grid(figure, readout, onPick);
      grid.show(item, options, width, { layer: settings.layer, head: settings.head });
      return grid;
    }
    const view = viewOf(item, 0, options);
    const drawing = settings.view === "lines" ? new Lines(figure, readout) : new Heatmap(figure, readout);
    drawing.show(view, title, width);
    return drawing;
  });
}
