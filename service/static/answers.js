// @ts-check
// The model's answer for each text, from /classify: the best label and every label's score as a bar.

import { call, withModel } from "./api.js";
import { formatValue } from "./colormap.js";

/** @typedef {{label: string, score: number}} Score */

/**
 * /classify's answer for each text (its labels, best first) from the model and task chosen, or null for a model
 * without a classification head.
 * @param {string[]} texts
 * @param {import("./facts.js").Facts} facts
 * @returns {Promise<Score[][] | null>}
 */
export async function classify(texts, facts) {
  if (facts.labels.length === 0) return null; // no classification head: nothing to ask
  const { json } = await call("/classify", withModel({ inputs: texts }, facts.model, facts.modelCount, facts.task));
  return /** @type {Score[][]} */ (json);
}

/**
 * One box per text; `answers` null: the model has no classification head, which a note says.
 * @param {HTMLElement} container
 * @param {string[]} texts
 * @param {Score[][] | null} answers
 * @param {string} model
 */
export function showAnswers(container, texts, answers, model) {
  container.replaceChildren();
  if (answers === null) {
    const note = document.createElement("p");
    note.className = "note";
    note.textContent = `The model ${model} has no classification head: no labels to show.`;
    container.append(note);
    return;
  }
  answers.forEach((scores, i) => {
    const box = document.createElement("div");
    box.className = "answer";
    box.dataset.label = scores[0].label;
    box.dataset.text = texts[i];
    const heading = document.createElement("h2");
    heading.textContent = `${texts.length > 1 ? `Text ${i + 1}` : "Text"}: ${scores[0].label}`;
    box.append(heading, ...scores.map(scoreRow));
    container.append(box);
  });
}

/** @param {Score} score */
function scoreRow({ label, score }) {
  const row = document.createElement("div");
  row.className = "score";
  const name = document.createElement("span");
  name.textContent = label;
  const track = document.createElement("span");
  const bar = document.createElement("span");
  bar.className = "bar";
  bar.style.display = "block";
  bar.style.width = `${(100 * score).toFixed(1)}%`;
  track.append(bar);
  const value = document.createElement("span");
  value.className = "value";
  value.textContent = formatValue(score);
  row.append(name, track, value);
  return row;
}
