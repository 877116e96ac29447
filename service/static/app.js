// @ts-check
// The attention explorer: loads the served models' facts, runs the texts, and wires the page's forms and
// controls to the modules that own them (models.js: the model and task chosen; attentionviews.js: the views and
// their controls; imageform.js and imageview.js: an image model's image and its view; maxsimform.js: the MaxSim
// view; messages.js: the message line; state.js: what they share).
// Every failure (a 4xx/5xx answer, a text over a cap, no server) ends as a message on the page; nothing is
// left blank.

import { setApiKey } from "./api.js";
import { classify, showAnswers } from "./answers.js";
import { render, syncControls, wireViews } from "./attentionviews.js";
import { wireImage } from "./imageform.js";
import { showImage } from "./imageview.js";
import { checkTexts, currentTexts } from "./inputs.js";
import { keepLink, linkProblem, readLink } from "./link.js";
import { runMaxSim } from "./maxsimform.js";
import { fail, showMessage } from "./messages.js";
import { loadFacts, useModel } from "./models.js";
import { ui } from "./page.js";
import { facts, state } from "./state.js";

let runs = 0; // each run's number: the labels of an older run are dropped too

async function run() {
  if (state.served.models.length === 0 && !(await loadFacts())) return;
  if (facts.images) {
    await showImage();
    return;
  }
  const chosen = currentTexts();
  const problem = checkTexts(chosen);
  if (problem) {
    fail(new Error(problem));
    return;
  }
  state.texts = chosen;
  keepLink(chosen, facts, state.pair);
  const mine = ++runs;
  showMessage("");
  ui.run.disabled = true;
  try {
    const [answers] = await Promise.all([classify(chosen, facts), render()]);
    if (mine === runs) showAnswers(ui.answers, chosen, answers, facts.model);
  } catch (error) {
    if (mine !== runs) return;
    ui.answers.replaceChildren();
    fail(error);
  } finally {
    if (mine === runs) ui.run.disabled = false;
  }
}

/**
 * What a link to the page asks for: its texts go in the boxes, its model and task are chosen once the facts are
 * loaded. Returns what it asked for.
 */
function fromLink() {
  const linked = readLink();
  if (linked.text !== null) ui.textA.value = linked.text;
  if (linked.compare !== null) {
    ui.compare.checked = true;
    ui.textBBox.hidden = false;
    ui.textB.value = linked.compare;
  }
  if (linked.pair) {
    ui.maxsimQuery.value = linked.pair.query;
    ui.maxsimDocument.value = linked.pair.document;
  }
  Object.assign(facts, { model: linked.model, task: linked.task });
  return linked;
}

function wire() {
  ui.textForm.addEventListener("submit", (e) => { e.preventDefault(); run(); });
  for (const box of [ui.textA, ui.textB]) {
    box.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(); }
    });
  }
  ui.compare.addEventListener("change", () => { ui.textBBox.hidden = !ui.compare.checked; });
  ui.keyForm.addEventListener("submit", (e) => { e.preventDefault(); useKey(); });
  ui.model.addEventListener("change", () => { useModel(ui.model.value); run(); runMaxSim(); });
  ui.task.addEventListener("change", () => { useModel(facts.key, ui.task.value); run(); runMaxSim(); });
  ui.maxsimForm.addEventListener("submit", (e) => { e.preventDefault(); runMaxSim(); });
  wireImage(showImage);
  wireViews();
}

async function useKey() {
  setApiKey(ui.apiKey.value.trim());
  ui.apiKey.value = "";
  showMessage("");
  if (await loadFacts()) run();
}

wire();
syncControls();
const linked = fromLink();
loadFacts().then(async (ok) => {
  if (!ok) return;
  await Promise.all([run(), runMaxSim()]);
  const problem = linkProblem(linked, facts);
  if (problem && ui.message.hidden) showMessage(problem);
});
