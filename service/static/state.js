// @ts-check
// What the explorer holds between events: the view settings, the chosen model's facts, every served model, the
// texts last run, what the views show and the MaxSim pair last drawn. One object each, shared by the modules that
// read and change them (an ES module's `let` cannot be assigned from outside it).

/** @typedef {import("./facts.js").Facts} Facts */
/** @typedef {import("./facts.js").Served} Served */
/** @typedef {import("./views.js").Settings} Settings */

/** @type {Settings} */
export const settings = { view: "heatmap", layer: 0, head: 0, combine: "none", hideSpecial: false, renormalise: false };

/** @type {Facts} the chosen model's */
export const facts = { model: "", key: "", modelCount: 0, numLayers: 0, numHeads: 0, maxLength: 0, windows: [], causal: false,
  maxChars: Infinity, labels: [], attention: false, adapters: [], task: "", multiVector: false, images: false };

/**
 * @type {{
 *   served: Served,
 *   texts: string[],
 *   shown: {answer: import("./views.js").Answer | null, drawings: import("./views.js").Drawing[]},
 *   pair: import("./link.js").Pair | null,
 *   image: {uri: string, name: string} | null,
 *   query: number | null,
 * }}
 * served: every served model, from /info (none until it answered); texts: the texts last run; shown: what the
 * views show; pair: the query and document the MaxSim view last drew; image: the image an image model was given last
 * (a data URI, and its file's name); query: the token whose row of the map the image view draws (null: the class
 * token, or the first patch where there is none)
 */
export const state = { served: { models: [], maxChars: Infinity }, texts: [], shown: { answer: null, drawings: [] },
  pair: null, image: null, query: null };
