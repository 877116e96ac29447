// @ts-check
// Attention maps as the views use them. An /attention item has `tokens` and `shape`: (layers, heads, n, n)
// for one head per map, (layers, n, n) for a mean or max over heads, (n, n) for rollout; its values are
// one row-major Float32Array. A "map" below is one n x n square of it: rows are queries, columns keys.

import { decodeFloat16 } from "./half.js";

/**
 * A token of an /attention item: its id, its text, where it is in the input (characters), whether it is special.
 * @typedef {{id: number, text: string, start: number, stop: number, special: boolean}} Token
 */

/**
 * One text's item as /attention answers it: the maps as base64 float16 (what the page asks for), or as JSON
 * numbers nested as deep as `shape` is long (flat(3) flattens any of the three depths).
 * @typedef {{tokens: Token[], shape: number[], attention: string | number[][][][]}} WireItem
 */

/**
 * An item decoded: `values` holds every map of it, row-major.
 * @typedef {{tokens: Token[], shape: number[], values: Float32Array}} Item
 */

/**
 * What a view draws of one map: the tokens shown, their indices in the item, their (m, m) values and the maximum,
 * the window of the layer it is from (tokens on each side a local layer attends to; null: a global layer), and
 * whether the model is causal (a decoder's: a token sees itself and the tokens before it, and a local layer's
 * window reaches back only).
 * @typedef {{tokens: Token[], indices: number[], values: Float32Array, max: number, window: number | null,
 *   causal: boolean}} View
 */

/** @typedef {{hideSpecial: boolean, renormalise: boolean}} ViewOptions */

/**
 * @param {WireItem} item
 * @returns {Item}
 */
export function decodeItem(item) {
  const values = typeof item.attention === "string" ? decodeFloat16(item.attention) : Float32Array.from(item.attention.flat(3));
  return { tokens: item.tokens, shape: item.shape, values };
}

/**
 * The index-th n x n map of an item (maps counted in C order over the leading axes).
 * @param {Item} item
 * @param {number} index
 */
export function mapAt(item, index) {
  const n = item.tokens.length;
  return item.values.subarray(index * n * n, (index + 1) * n * n);
}

/**
 * Indices of the tokens a view shows.
 * @param {Token[]} tokens
 * @param {boolean} hideSpecial
 */
export function keptIndices(tokens, hideSpecial) {
  /** @type {number[]} */
  const kept = [];
  tokens.forEach((token, i) => {
    if (!(hideSpecial && token.special)) kept.push(i);
  });
  return kept;
}

/**
 * The rows and columns of `kept` from an n x n map; with `renormalise`, each row rescaled to sum to 1
 * (what the query's attention would be over the tokens left).
 * @param {Float32Array} map
 * @param {number} n
 * @param {number[]} kept
 * @param {boolean} renormalise
 */
export function project(map, n, kept, renormalise) {
  const m = kept.length;
  const out = new Float32Array(m * m);
  for (let r = 0; r < m; r++) {
    const row = kept[r] * n;
    for (let c = 0; c < m; c++) out[r * m + c] = map[row + kept[c]];
  }
  if (renormalise) normaliseRows(out, m);
  return out;
}

/**
 * @param {Float32Array} values (m, m), rescaled in place
 * @param {number} m
 */
function normaliseRows(values, m) {
  for (let r = 0; r < m; r++) {
    let sum = 0;
    for (let c = 0; c < m; c++) sum += values[r * m + c];
    if (sum > 0) for (let c = 0; c < m; c++) values[r * m + c] /= sum;
  }
}

/** @param {Float32Array} values */
export function maxOf(values) {
  let max = 0;
  for (const v of values) if (v > max) max = v;
  return max;
}

/**
 * Everything a view draws for one map: the kept tokens and their indices in the item, their square of
 * values and its maximum, and its layer's window.
 * @param {Item} item
 * @param {number} index
 * @param {ViewOptions} options
 * @param {number | null} [window] a local layer's reach on each side (null: a global layer, or a rollout)
 * @param {boolean} [causal] a causal model's map (a mix or rollout of its heads is lower-triangular too)
 * @returns {View}
 */
export function viewOf(item, index, options, window = null, causal = false) {
  const kept = keptIndices(item.tokens, options.hideSpecial);
  const values = project(mapAt(item, index), item.tokens.length, kept, options.hideSpecial && options.renormalise);
  return { tokens: kept.map((i) => item.tokens[i]), indices: kept, values, max: maxOf(values), window, causal };
}

/**
 * Whether the cell (row, col) of a view is a key its query cannot see: a later token in a causal model's map,
 * or a key beyond its local layer's window, positions in the input (not in the view, which may hide special
 * tokens) more than `window` apart (for a causal model: more than `window` back). Such cells are 0 by
 * construction, which the views show as masked rather than as a low weight.
 * @param {View} view
 * @param {number} row
 * @param {number} col
 */
export function outsideWindow(view, row, col) {
  const back = view.indices[row] - view.indices[col];
  if (view.causal && back < 0) return true;
  return view.window !== null && Math.abs(back) > view.window;
}

/**
 * Whether (row, col) is masked because the key comes after the query in a causal model.
 * @param {View} view
 * @param {number} row
 * @param {number} col
 */
export function later(view, row, col) {
  return view.causal && view.indices[col] > view.indices[row];
}

/**
 * A local layer's reach as the labels write it: ±w both ways, −w back only for a causal model.
 * @param {number} window
 * @param {boolean} causal
 */
export function reach(window, causal) {
  return causal ? `−${window}` : `±${window}`;
}

/**
 * The same reach in a sentence, where "−3 tokens" would read as a negative count: "±2 tokens", "3 tokens back".
 * @param {number} window
 * @param {boolean} causal
 */
export function reachInWords(window, causal) {
  return causal ? `${window} tokens back` : `±${window} tokens`;
}

/**
 * A token as the axes show it: the text, with whitespace-only ones made visible and long ones cut.
 * @param {Token} token
 */
export function tokenLabel(token) {
  const text = token.text.trim() === "" ? "␣" : token.text;
  return text.length > 16 ? `${text.slice(0, 15)}…` : text;
}
