// @ts-check
// The three views of the texts last run: what each asks /attention for (only the layers and heads it shows,
// as base64 float16), the panels (one per text, side by side), and which drawing module draws them.

import { call, withModel } from "./api.js";
import { Grid } from "./grid.js";
import { Heatmap } from "./heatmap.js";
import { Lines } from "./lines.js";
import { layerKind } from "./facts.js";
import { decodeItem, viewOf } from "./matrix.js";

/** @typedef {import("./facts.js").Facts} Facts */
/** @typedef {import("./matrix.js").Item} Item */
/** @typedef {import("./matrix.js").WireItem} WireItem */

/** @typedef {"heatmap" | "grid" | "lines"} ViewName */
/** @typedef {"none" | "mean" | "max" | "rollout"} Combine one head, the heads of a layer combined, or rollout */

/**
 * What the controls chose.
 * @typedef {object} Settings
 * @property {ViewName} view
 * @property {number} layer
 * @property {number} head
 * @property {Combine} combine
 * @property {boolean} hideSpecial
 * @property {boolean} renormalise
 */

/**
 * An /attention request body, less the `model` and `task` (api.withModel adds them). An image model's inputs are
 * images as data URIs.
 * @typedef {object} AttentionBody
 * @property {string[]} inputs
 * @property {"base64"} encoding
 * @property {"float16"} dtype
 * @property {number[]} [layers]
 * @property {number[]} [heads]
 * @property {"mean" | "max" | "rollout"} [aggregation]
 */

/**
 * Where an image model's tokens lie (an /attention answer's `grid`): `first` tokens before the patches (the class
 * token, registers), then rows x cols patches row by row, each patch_size pixels of the height x width image.
 * @typedef {{rows: number, cols: number, first: number, class_token: boolean, patch_size: number, height: number,
 *   width: number}} PatchGrid
 */
/**
 * An /attention answer decoded, the exact text it came in, and an image model's grid (null for texts).
 * @typedef {{items: Item[], text: string, grid: PatchGrid | null}} Answer
 */
/** @typedef {{panel: HTMLElement, figure: HTMLElement, readout: HTMLElement}} Panel */
/** @typedef {Grid | Heatmap | Lines | import("./patches.js").Patches} Drawing */

/** @type {Map<string, Answer>} request body (JSON) -> its answer; the last few */
const cache = new Map();
const CACHE_SIZE = 6;

/**
 * The /attention request body a view needs. Heatmap and lines: one map (a head, or the heads combined,
 * of one layer; or the rollout). The grid: every layer and head.
 * @param {Settings} settings
 * @param {string[]} texts
 * @returns {AttentionBody}
 */
export function attentionBody(settings, texts) {
  /** @type {AttentionBody} */
  const body = { inputs: texts, encoding: "base64", dtype: "float16" };
  if (settings.view === "grid") return body;
  if (settings.combine === "rollout") return { ...body, aggregation: "rollout" };
  if (settings.combine === "none") return { ...body, layers: [settings.layer], heads: [settings.head] };
  return { ...body, layers: [settings.layer], aggregation: settings.combine };
}

/**
 * The answer to `body` for the model and task chosen, from the cache when it was asked for lately.
 * @param {AttentionBody} body
 * @param {Facts} facts
 * @returns {Promise<Answer>}
 */
export async function fetchAttention(body, facts) {
  const request = withModel(body, facts.model, facts.modelCount, facts.task);
  const key = JSON.stringify(request);
  let answer = cache.get(key);
  if (answer === undefined) {
    const { json, text } = await call("/attention", request);
    const wire = /** @type {{data: WireItem[], grid?: PatchGrid}} */ (json);
    answer = { items: wire.data.map(decodeItem), text, grid: wire.grid ?? null };
    cache.set(key, answer);
    const oldest = cache.keys().next().value;
    if (cache.size > CACHE_SIZE && oldest !== undefined) cache.delete(oldest);
  }
  return answer;
}

/**
 * What the map shows: its layer and head (or heads combined, or the rollout), and the task when one is chosen.
 * @param {Settings} settings
 * @param {Facts} facts
 */
export function mapTitle(settings, facts) {
  const task = facts.task ? ` · task ${facts.task}` : "";
  if (settings.combine === "rollout") return `rollout over ${facts.numLayers} layers${task}`;
  const kind = layerKind(facts, settings.layer);
  const layer = kind ? `layer ${settings.layer} (${kind})` : `layer ${settings.layer}`;
  if (settings.combine === "none") return `${layer} · head ${settings.head}${task}`;
  return `${layer} · ${settings.combine} over heads${task}`;
}

/**
 * Empties `container` and adds one panel per text: a heading, a note, a scrolling figure, a read-out.
 * @param {HTMLElement} container
 * @param {string[]} texts
 * @param {Item[]} items
 * @param {boolean} hideSpecial
 * @returns {Panel[]}
 */
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

/**
 * @param {string} text
 * @param {import("./matrix.js").Token[]} tokens
 * @param {boolean} hideSpecial
 */
function tokenNote(text, tokens, hideSpecial) {
  const plain = tokens.filter((t) => !t.special);
  const shown = hideSpecial ? ` (${plain.length} shown: special tokens hidden)` : "";
  const last = plain.at(-1);
  const cut = last && last.stop < text.trimEnd().length ? `; cut at character ${last.stop} (the model's max length)` : "";
  return `${tokens.length} tokens${shown}${cut}`;
}

/**
 * A new element of `tag`, of class `className`, holding `text` when given.
 * @param {string} tag
 * @param {string} className
 * @param {string} [text]
 */
export function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/**
 * Draws the view into each panel; returns the drawings (each has a .canvas).
 * @param {Settings} settings
 * @param {Facts} facts
 * @param {Answer} answer
 * @param {Panel[]} panels
 * @param {(layer: number, head: number) => void} onPick the grid's: open a head in the heatmap
 * @returns {Drawing[]}
 */
export function draw(settings, facts, answer, panels, onPick) {
  const options = { hideSpecial: settings.hideSpecial, renormalise: settings.renormalise };
  const title = mapTitle(settings, facts);
  return panels.map(({ figure, readout }, i) => {
    const item = answer.items[i];
    const width = Math.max(figure.clientWidth - 4, 240);
    if (settings.view === "grid") {
      const grid = new Grid(figure, readout, onPick);
      grid.show(item, options, width, { layer: settings.layer, head: settings.head }, facts.windows, facts.causal);
      return grid;
    }
    const window = settings.combine === "rollout" ? null : facts.windows[settings.layer] ?? null;
    const view = viewOf(item, 0, options, window, facts.causal);  // heads mixed or rolled out stay lower-triangular
    if (settings.view === "lines") {
      const lines = new Lines(figure, readout);
      lines.show(view, title);
      return lines;
    }
    const heatmap = new Heatmap(figure, readout);
    heatmap.show(view, title, width);
    return heatmap;
  });
}
