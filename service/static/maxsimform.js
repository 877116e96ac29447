// @ts-check
// The MaxSim form: a query and a document typed, /maxsim's map of them drawn for the model (and task) chosen,
// its score written and the pair kept in the link. Shown only for a model with token vectors. #maxsim carries
// data-state="idle" | "loading" | "ready" | "error" and, once drawn, data-model, data-query and data-document:
// what its map is of.

import { checkPair, currentTexts } from "./inputs.js";
import { keepLink } from "./link.js";
import { MaxSimMap, fetchMaxSim, scoreLine } from "./maxsim.js";
import { showMessage } from "./messages.js";
import { ui } from "./page.js";
import { facts, state } from "./state.js";

let maxsimRuns = 0; // each MaxSim run's number: an older one's answer is dropped

// The MaxSim view emptied, and shown only for a model with token vectors (its pair is forgotten for one without).
export function clearMaxSim() {
  ui.maxsimBox.hidden = !facts.multiVector;
  if (!facts.multiVector) state.pair = null;
  ui.maxsimFigure.replaceChildren();
  ui.maxsimReadout.textContent = "";
  ui.maxsimScore.textContent = "";
  ui.maxsim.dataset.state = "idle";
}

// The MaxSim view of the query and document typed, for the model (and task) chosen: /maxsim's map drawn, its
// score written, the pair kept in the link.
export async function runMaxSim() {
  if (!facts.multiVector) return;
  const query = ui.maxsimQuery.value;
  const document = ui.maxsimDocument.value;
  const problem = checkPair(query, document);
  const mine = ++maxsimRuns;
  ui.maxsim.dataset.state = "loading";
  ui.maxsimRun.disabled = true;
  try {
    if (problem) throw new Error(problem);
    const answer = await fetchMaxSim(query, document, facts);
    if (mine !== maxsimRuns) return;
    state.pair = { query, document };
    ui.maxsimFigure.replaceChildren();
    new MaxSimMap(ui.maxsimFigure, ui.maxsimReadout).show(answer, Math.max(ui.maxsimFigure.clientWidth - 4, 240));
    ui.maxsimScore.textContent = scoreLine(answer);
    Object.assign(ui.maxsimScore.dataset, { score: String(answer.score), reduction: answer.reduction });
    Object.assign(ui.maxsim.dataset, { state: "ready", model: facts.model, query, document });
    keepLink(state.texts.length ? state.texts : currentTexts(), facts, state.pair);
  } catch (error) {
    if (mine !== maxsimRuns) return;
    showMessage(error instanceof Error ? error.message : String(error));
    ui.maxsim.dataset.state = "error";
  } finally {
    if (mine === maxsimRuns) ui.maxsimRun.disabled = false;
  }
}
