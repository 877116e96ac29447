// @ts-check
// The served models' facts, from GET /info (which lists every served model under `models`): for the model
// chosen, what the controls and requests depend on (its layers and heads, which layers attend locally, labels,
// max length, whether it serves attention and token vectors (MaxSim), its tasks: the LoRA adapters it carries, the
// characters a text may have). The first model listed is the server's default.

import { call } from "./api.js";
import { reach, reachInWords } from "./matrix.js";

/**
 * One served model as GET /info lists it (the fields the page reads).
 * @typedef {object} ModelInfo
 * @property {string} name the served name, which a request's `model` field names
 * @property {number} num_layers
 * @property {number} num_heads
 * @property {number} max_length
 * @property {(number | null)[]} [attention_windows] per layer, the tokens on each side a local (sliding-window)
 *   layer attends to, or null for a global layer
 * @property {boolean} [causal] a decoder's causal mask: a token attends to itself and the tokens before it
 * @property {string[]} labels empty for a model without a classification head
 * @property {Record<string, string>} variants graph kind -> variant served: no "attention" without an attention graph
 * @property {string[]} [adapters] its tasks: the names of the LoRA adapters its bundle carries (none: empty)
 * @property {string[]} [tasks] what it can be asked (embed, attention, multi_vector, ...)
 * @property {number} [max_input_chars] characters per text this model takes (ATTNSERVE_MAX_INPUT_CHARS, or unset
 *   its default for the model's max length)
 * @property {string[]} [modalities] what it reads: ["text"], ["image"] or both (a two-tower model)
 * @property {{num_layers: number, num_heads: number, max_length: number, variants: Record<string, string>,
 *   tasks: string[]}} [image_tower] a two-tower model's image tower (CLIP, SigLIP)
 * @property {string} [key] the page's own name for an entry: the served name, or for a two-tower model's image side
 *   the name and " · images" (loadServed lists that side as a model of its own)
 */

/**
 * What the page knows of the served models.
 * @typedef {object} Served
 * @property {ModelInfo[]} models
 * @property {number} maxChars characters per text of the default model (a server before per-model caps: of every
 *   model)
 */

/**
 * The chosen model's facts, as the views, the requests and the checks read them.
 * @typedef {object} Facts
 * @property {string} model its served name
 * @property {string} key its entry in the model picker: the served name, or a two-tower model's image side's
 * @property {number} modelCount how many models the server serves (requests name the model only when several)
 * @property {number} numLayers
 * @property {number} numHeads
 * @property {number} maxLength
 * @property {(number | null)[]} windows per layer, a local layer's reach on each side, or null (global)
 * @property {boolean} causal whether the model is causal (its maps are lower-triangular, its windows one-sided)
 * @property {number} maxChars
 * @property {string[]} labels
 * @property {boolean} attention whether it has an attention graph (/attention answers for it)
 * @property {string[]} adapters its tasks (LoRA adapters), which a request's `task` names; empty for none
 * @property {string} task the task chosen, one of `adapters`; "" for none: the bare base model
 * @property {boolean} multiVector whether it gives token vectors for late interaction (/maxsim answers for it)
 * @property {boolean} images whether it reads images only (an image model: the page takes an image, not texts)
 */

/** @returns {Promise<Served>} */
export async function loadServed() {
  const { json } = await call("/info");
  const info = /** @type {{models: ModelInfo[], limits: {max_input_chars: number}}} */ (json);
  return { models: info.models.flatMap(sides), maxChars: info.limits.max_input_chars };
}

/**
 * A served model as the page lists it: itself, and after a two-tower model its image side (the image tower's
 * layers, heads and tokens; requests name the model, whose images go to that tower).
 * @param {ModelInfo} entry
 * @returns {ModelInfo[]}
 */
function sides(entry) {
  const tower = entry.image_tower;
  if (!tower) return [{ ...entry, key: entry.name }];
  const images = { ...entry, ...tower, key: `${entry.name} · images`, modalities: ["image"], labels: [], adapters: [],
    attention_windows: undefined, causal: false };
  return [{ ...entry, key: entry.name }, images];
}

/**
 * The facts of the model called `name`, or of the default (first) one when no served model has that name, with
 * the task `task` chosen when that model has it (the bare base otherwise).
 * @param {Served} served
 * @param {string | null} name
 * @param {string} [task]
 * @returns {Facts}
 */
export function factsOf(served, name, task = "") {
  const entry = served.models.find((m) => (m.key ?? m.name) === name) ?? served.models[0];
  const adapters = entry.adapters ?? [];
  return {
    model: entry.name, key: entry.key ?? entry.name, modelCount: served.models.length, numLayers: entry.num_layers,
    numHeads: entry.num_heads,
    maxLength: entry.max_length, windows: entry.attention_windows ?? Array(entry.num_layers).fill(null),
    causal: entry.causal ?? false,
    maxChars: entry.max_input_chars ?? served.maxChars, labels: entry.labels, attention: "attention" in entry.variants,
    adapters, task: adapters.includes(task) ? task : "", multiVector: (entry.tasks ?? []).includes("multi_vector"),
    images: (entry.modalities ?? []).join() === "image",
  };
}

/**
 * How layer `layer` attends, for its label: "" for a global layer, "local ±w" for a sliding-window one ("local −w"
 * for a causal model's, which reaches back only).
 * @param {Facts} facts
 * @param {number} layer
 */
export function layerKind(facts, layer) {
  const window = facts.windows[layer];
  return window === null || window === undefined ? "" : `local ${reach(window, facts.causal)}`;
}

/**
 * The line under the page's title: the model's name, size, labels and tasks, and what it cannot do.
 * @param {Facts} facts
 */
export function describe(facts) {
  const labels = facts.labels.length ? `labels: ${facts.labels.join(", ")}` : "no classification head";
  const attention = facts.attention ? "" : " · no attention graph";
  const local = facts.windows.flatMap((w, layer) => (w === null ? [] : [layer]));
  const which = local.length === 1 ? `layer ${local[0]} attends` : `layers ${local.join(", ")} attend`;
  const windows = local.length ? ` · ${which} ${reachInWords(Number(facts.windows[local[0]]), facts.causal)}` : "";
  const causal = facts.causal ? " · causal: each token sees only itself and the tokens before it" : "";
  const tasks = facts.adapters.length ? ` · tasks: ${facts.adapters.join(", ")}` : "";
  const late = facts.multiVector ? " · token vectors: MaxSim below" : "";
  const size = facts.images ? `${facts.maxLength} tokens an image (class token and patches)` : `up to ${facts.maxLength} tokens`;
  return `${facts.model} · ${facts.numLayers} layers × ${facts.numHeads} heads${causal}${windows} · ${size}`
    + ` · ${labels}${tasks}${attention}${late}`;
}
