// @ts-check
// The texts typed, and what is wrong with them before anything is sent: an empty text, or one longer than the
// server takes (ATTNSERVE_MAX_INPUT_CHARS).

import { ui } from "./page.js";
import { facts } from "./state.js";

/** The text, and the second text when comparing. */
export function currentTexts() {
  const chosen = [ui.textA.value];
  if (ui.compare.checked) chosen.push(ui.textB.value);
  return chosen;
}

/**
 * What is wrong with the texts, before anything is sent ("" when nothing is).
 * @param {string[]} chosen
 */
export function checkTexts(chosen) {
  if (chosen.some((t) => t.trim() === "")) return "Type a text first (both texts when comparing).";
  const long = chosen.findIndex((t) => t.length > facts.maxChars);
  if (long < 0) return "";
  return `Text ${long + 1} has ${chosen[long].length} characters; this model takes at most ${facts.maxChars}`
    + " per text (ATTNSERVE_MAX_INPUT_CHARS). Shorten it.";
}

/**
 * What is wrong with a MaxSim pair, before anything is sent ("" when nothing is).
 * @param {string} query
 * @param {string} document
 */
export function checkPair(query, document) {
  if (query.trim() === "" || document.trim() === "") return "Type a query and a document first.";
  const long = [query, document].find((t) => t.length > facts.maxChars);
  return long === undefined ? "" : `A MaxSim text has ${long.length} characters; this model takes at most`
    + ` ${facts.maxChars} per text (ATTNSERVE_MAX_INPUT_CHARS). Shorten it.`;
}
