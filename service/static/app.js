// @ts-check
// The attention explorer: loads the served models' facts, runs the texts, and keeps the controls, the views
// and the messages in step with the model chosen (its layers, heads and labels; whether it has attention; its
// tasks, the LoRA adapters a request may run instead of the bare base, with the task chosen; whether it has token
// vectors, which show the MaxSim view of a query and a document).
// Every failure (a 4xx/5xx answer, a text over a cap, no server) ends as a message on the page; nothing is
// left blank. #views carries data-state="loading" | "ready" | "error" | "unavailable" (the model chosen has
// no attention graph) and, once drawn, data-model and data-task: the model its views are of, and its task ("" for
// the bare base). #maxsim carries data-state="idle" | "loading" | "ready" | "error" and, once drawn, data-model,
// data-query and data-document: what its map is of.

import { ApiError, setApiKey } from "./api.js";
import { classify, showAnswers } from "./answers.js";
import { downloadCanvas, downloadText } from "./exporter.js";
import { describe, factsOf, layerKind, loadServed } from "./facts.js";
import { keepLink, linkProblem, readLink } from "./link.js";
import { MaxSimMap, fetchMaxSim, scoreLine } from "./maxsim.js";
import { tabs, ui } from "./page.js";
import { attentionBody, draw, fetchAttention, makePanels, mapTitle } from "./views.js";

/** @typedef {import("./facts.js").Facts} Facts */
/** @typedef {import("./facts.js").Served} Served */
/** @typedef {import("./views.js").Settings} Settings */
/** @typedef {import("./views.js").ViewName} ViewName */
/** @typedef {import("./views.js").Combine} Combine */

/** @type {Settings} */
const settings = { view: "heatmap", layer: 0, head: 0, combine: "none", hideSpecial: false, renormalise: false };
/** @type {Served} every served model, from /info; none until it answered */
let served = { models: [], maxChars: Infinity };
/** @type {Facts} the chosen model's */
const facts = { model: "", modelCount: 0, numLayers: 0, numHeads: 0, maxLength: 0, windows: [], causal: false, maxChars: Infinity,
  labels: [], attention: false, adapters: [], task: "", multiVector: false };
/** @type {string[]} the texts last run */
let texts = [];
/** @type {{answer: import("./views.js").Answer | null, drawings: import("./views.js").Drawing[]}} what the views show */
let shown = { answer: null, drawings: [] };
let generation = 0; // each render's number: answers to an older one are dropped
let runs = 0; // each run's number: the labels of an older run are dropped too
/** @type {import("./link.js").Pair | null} the query and document the MaxSim view last drew */
let pair = null;
let maxsimRuns = 0; // each MaxSim run's number: an older one's answer is dropped

/** @param {string} text "" hides the message */
function showMessage(text) {
  ui.message.textContent = text;
  ui.message.hidden = !text;
}

/** @param {unknown} error */
function fail(error) {
  if (error instanceof ApiError && error.status === 401) {
    ui.keyForm.hidden = false;
    ui.apiKey.focus();
  }
  showMessage(error instanceof Error ? error.message : String(error));
  ui.views.dataset.state = "error";
}

async function loadFacts() {
  try {
    served = await loadServed();
    useModel(facts.model);
    fillModels(served.models.map((m) => m.name));
    ui.keyForm.hidden = true;
    return true;
  } catch (error) {
    ui.modelInfo.textContent = "The model's facts could not be loaded.";
    fail(error);
    return false;
  }
}

/**
 * Takes the facts of the model called `name` (the default one when no model is) with the task `task` (kept when
 * the model has it, else the bare base): the layer and head pickers list its layers and heads (the layer and head
 * chosen are kept where it has them), the task picker its tasks (hidden when it has none), its line is shown, and
 * the answers of the model or task before are cleared.
 * @param {string} name
 * @param {string} [task] "" for none: the bare base model
 */
function useModel(name, task = facts.task) {
  Object.assign(facts, factsOf(served, name, task));
  settings.layer = Math.max(0, Math.min(settings.layer, facts.numLayers - 1));
  settings.head = Math.max(0, Math.min(settings.head, facts.numHeads - 1));
  fillSelect(ui.layer, facts.numLayers, settings.layer, (i) => layerKind(facts, i));
  fillSelect(ui.head, facts.numHeads, settings.head);
  fillTasks();
  ui.modelInfo.textContent = describe(facts);
  ui.answers.replaceChildren();
  clearMaxSim();
  syncControls();
}

// The MaxSim view emptied, and shown only for a model with token vectors (its pair is forgotten for one without).
function clearMaxSim() {
  ui.maxsimBox.hidden = !facts.multiVector;
  if (!facts.multiVector) pair = null;
  ui.maxsimFigure.replaceChildren();
  ui.maxsimReadout.textContent = "";
  ui.maxsimScore.textContent = "";
  ui.maxsim.dataset.state = "idle";
}

/** @param {string[]} names */
function fillModels(names) {
  ui.modelBox.hidden = names.length < 2;
  ui.model.replaceChildren(...names.map((name) => new Option(name, name, false, name === facts.model)));
}

// The task picker: none (the bare base) and then each of the model's adapters; hidden for a model without any.
function fillTasks() {
  ui.taskBox.hidden = facts.adapters.length === 0;
  const base = new Option("none (the base model)", "", false, facts.task === "");
  ui.task.replaceChildren(base, ...facts.adapters.map((name) => new Option(name, name, false, name === facts.task)));
}

/**
 * @param {HTMLSelectElement} select
 * @param {number} count options 0 .. count - 1
 * @param {number} chosen
 * @param {(i: number) => string} [note] shown after an option's number (a local layer's window)
 */
function fillSelect(select, count, chosen, note = () => "") {
  select.replaceChildren(...Array.from({ length: count }, (_, i) => {
    const label = note(i) ? `${i} · ${note(i)}` : String(i);
    return new Option(label, String(i), false, i === chosen);
  }));
}

function currentTexts() {
  const chosen = [ui.textA.value];
  if (ui.compare.checked) chosen.push(ui.textB.value);
  return chosen;
}

/**
 * What is wrong with the texts, before anything is sent ("" when nothing is).
 * @param {string[]} chosen
 */
function checkTexts(chosen) {
  if (chosen.some((t) => t.trim() === "")) return "Type a text first (both texts when comparing).";
  const long = chosen.findIndex((t) => t.length > facts.maxChars);
  if (long < 0) return "";
  return `Text ${long + 1} has ${chosen[long].length} characters; this server takes at most ${facts.maxChars}`
    + " per text (ATTNSERVE_MAX_INPUT_CHARS). Shorten it.";
}

async function run() {
  if (served.models.length === 0 && !(await loadFacts())) return;
  const chosen = currentTexts();
  const problem = checkTexts(chosen);
  if (problem) {
    fail(new Error(problem));
    return;
  }
  texts = chosen;
  keepLink(chosen, facts, pair);
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
 * What is wrong with a MaxSim pair, before anything is sent ("" when nothing is).
 * @param {string} query
 * @param {string} document
 */
function checkPair(query, document) {
  if (query.trim() === "" || document.trim() === "") return "Type a query and a document first.";
  const long = [query, document].find((t) => t.length > facts.maxChars);
  return long === undefined ? "" : `A MaxSim text has ${long.length} characters; this server takes at most`
    + ` ${facts.maxChars} per text (ATTNSERVE_MAX_INPUT_CHARS). Shorten it.`;
}

// The MaxSim view of the query and document typed, for the model (and task) chosen: /maxsim's map drawn, its
// score written, the pair kept in the link.
async function runMaxSim() {
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
    pair = { query, document };
    ui.maxsimFigure.replaceChildren();
    new MaxSimMap(ui.maxsimFigure, ui.maxsimReadout).show(answer, Math.max(ui.maxsimFigure.clientWidth - 4, 240));
    ui.maxsimScore.textContent = scoreLine(answer);
    Object.assign(ui.maxsimScore.dataset, { score: String(answer.score), reduction: answer.reduction });
    Object.assign(ui.maxsim.dataset, { state: "ready", model: facts.model, query, document });
    keepLink(texts.length ? texts : currentTexts(), facts, pair);
  } catch (error) {
    if (mine !== maxsimRuns) return;
    showMessage(error instanceof Error ? error.message : String(error));
    ui.maxsim.dataset.state = "error";
  } finally {
    if (mine === maxsimRuns) ui.maxsimRun.disabled = false;
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

async function render() {
  if (texts.length === 0) return;
  const mine = ++generation;
  if (!facts.attention) {
    showUnavailable();
    return;
  }
  ui.views.dataset.state = "loading";
  let answer;
  try {
    answer = await fetchAttention(attentionBody(settings, texts), facts);
  } catch (error) {
    if (mine === generation) throw error;
    return; // a newer render is under way: its outcome is the one to show
  }
  if (mine !== generation) return;
  const panels = makePanels(ui.views, texts, answer.items, settings.hideSpecial);
  shown = { answer, drawings: draw(settings, facts, answer, panels, openInHeatmap) };
  Object.assign(ui.views.dataset, { state: "ready", view: settings.view, title: mapTitle(settings, facts),
    model: facts.model, task: facts.task });
}

// The model chosen has no attention graph: no /attention request, a note where the views would be.
function showUnavailable() {
  const note = document.createElement("p");
  note.className = "note";
  note.textContent = `The model ${facts.model} has no attention graph (its bundle was exported without one):`
    + ` there is no attention to show.${facts.labels.length ? " Its labels for the text are above." : ""}`;
  ui.views.replaceChildren(note);
  shown = { answer: null, drawings: [] };
  Object.assign(ui.views.dataset, { state: "unavailable", view: settings.view, title: "", model: facts.model,
    task: facts.task });
}

function rerender() {
  render().then(() => showMessage(""), fail);
}

/**
 * @param {number} layer
 * @param {number} head
 */
function openInHeatmap(layer, head) {
  Object.assign(settings, { layer, head, combine: "none" });
  syncControls();
  selectTab("heatmap");
}

function syncControls() {
  ui.layer.value = String(settings.layer);
  ui.head.value = String(settings.head);
  ui.combine.value = settings.combine;
  const none = !facts.attention;
  ui.layer.disabled = none || settings.combine === "rollout" || settings.view === "grid";
  ui.head.disabled = none || settings.combine !== "none" || settings.view === "grid";
  ui.combine.disabled = none || settings.view === "grid";
  ui.renormalise.disabled = none || !settings.hideSpecial;
  ui.exportPng.disabled = none;
  ui.exportJson.disabled = none;
}

/** @param {HTMLElement} tab */
function viewOfTab(tab) {
  return /** @type {ViewName} */ (tab.dataset.view);
}

/** @param {ViewName} view */
function selectTab(view) {
  settings.view = view;
  for (const tab of tabs()) {
    const on = viewOfTab(tab) === view;
    tab.setAttribute("aria-selected", String(on));
    tab.tabIndex = on ? 0 : -1;
    if (on) ui.views.setAttribute("aria-labelledby", tab.id);
  }
  syncControls();
  rerender();
}

/** @param {KeyboardEvent} event */
function onTabKey(event) {
  const all = tabs();
  const at = all.findIndex((tab) => tab === document.activeElement);
  /** @type {Record<string, number>} */
  const steps = { ArrowRight: 1, ArrowLeft: -1 };
  const step = steps[event.key];
  if (at < 0 || !step) return;
  event.preventDefault();
  const next = all[(at + step + all.length) % all.length];
  next.focus();
  selectTab(viewOfTab(next));
}

function exportPng() {
  shown.drawings.forEach((drawing, i) => downloadCanvas(drawing.canvas, `attention-${settings.view}-${i + 1}.png`));
}

function exportJson() {
  if (shown.answer) downloadText(shown.answer.text, `attention-${settings.view}.json`);
}

/** @param {Partial<Settings>} change */
function changeSettings(change) {
  Object.assign(settings, change);
  syncControls();
  rerender();
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
  ui.task.addEventListener("change", () => { useModel(facts.model, ui.task.value); run(); runMaxSim(); });
  ui.maxsimForm.addEventListener("submit", (e) => { e.preventDefault(); runMaxSim(); });
  ui.tabs.addEventListener("keydown", onTabKey);
  for (const tab of tabs()) tab.addEventListener("click", () => selectTab(viewOfTab(tab)));
  ui.layer.addEventListener("change", () => changeSettings({ layer: Number(ui.layer.value) }));
  ui.head.addEventListener("change", () => changeSettings({ head: Number(ui.head.value) }));
  ui.combine.addEventListener("change", () => changeSettings({ combine: /** @type {Combine} */ (ui.combine.value) }));
  ui.hideSpecial.addEventListener("change", () => changeSettings({ hideSpecial: ui.hideSpecial.checked }));
  ui.renormalise.addEventListener("change", () => changeSettings({ renormalise: ui.renormalise.checked }));
  ui.exportPng.addEventListener("click", exportPng);
  ui.exportJson.addEventListener("click", exportJson);
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
