// Attention maps as the views use them. An /attention item has `tokens` and `shape`: (layers, heads, n, n)
// for one head per map, (layers, n, n) for a mean or max over heads, (n, n) for rollout; its values are
// one row-major Float32Array. A "map" below is one n x n square of it: rows are queries, columns keys.

import { decodeFloat16 } from "./half.js";

export function decodeItem(item) {
  const values = typeof item.attention === "string" ? decodeFloat16(item.attention) : Float32Array.from(item.attention.flat(3));
  return { tokens: item.tokens, shape: item.shape, values };
}

// The index-th n x n map of an item (maps counted in C order over the leading axes).
export function mapAt(item, index) {
  const n = item.tokens.length;
  return item.values.subarray(index * n * n, (index + 1) * n * n);
}

// Indices of the tokens a view shows.
export function keptIndices(tokens, hideSpecial) {
  const kept = [];
  tokens.forEach((token, i) => {
    if (!(hideSpecial && token.special)) kept.push(i);
  });
  return kept;
}

// The rows and columns of `kept` from an n x n map; with `renormalise`, each row rescaled to sum to 1
// (what the query's attention would be over the tokens left).
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

function normaliseRows(values, m) {
  for (let r = 0; r < m; r++) {
    let sum = 0;
    for (let c = 0; c < m; c++) sum += values[r * m + c];
    if (sum > 0) for (let c = 0; c < m; c++) values[r * m + c] /= sum;
  }
}

export function maxOf(values) {
  let max = 0;
  for (const v of values) if (v > max) max = v;
  return max;
}

// Everything a view draws for one map: the kept tokens and their indices in the item, their square of
// values and its maximum.
export function viewOf(item, index, options) {
  const kept = keptIndices(item.tokens, options.hideSpecial);
  const values = project(mapAt(item, index), item.tokens.length, kept, options.hideSpecial && options.renormalise);
  return { tokens: kept.map((i) => item.tokens[i]), indices: kept, values, max: maxOf(values) };
}

// A token as the axes show it: the text, with special tokens and whitespace-only ones made visible.
export function tokenLabel(token) {
  const text = token.text.trim() === "" ? "␣" : token.text;
  return text.length > 16 ? `${text.slice(0, 15)}…` : text;
}
