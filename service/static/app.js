// The attention explorer: loads the served models' facts, runs the texts, and keeps the controls, the views
// and the messages in step with the model chosen (its layers, heads and labels; whether it has attention).
// Every failure (a 4xx/5xx answer, a text over a cap, no server) ends as a message on the page; nothing is
// left blank. #views carries data-state="loading" | "ready" | "error" | "unavailable" (the model chosen has
// no attention graph) and, once drawn, data-model: the model its views are of.

import { ApiError, setApiKey } from "./api.js";
import { classify, showAnswers } from "./answers.js";
import { downloadCanvas, downloadText } from "./exporter.js";
import { describe, factsOf, loadServed } from "./facts.js";
import { attentionBody, draw, fetchAttention, makePanels, mapTitle } from "./views.js";

const $ = (id) => document.getElementById(id);
const settings = { view: "heatmap", layer: 0, head: 0, combine: "none", hideSpecial: false, renormalise: false };
let served = { models: [], maxChars: Infinity }; // every served model, from /info; empty until it answered
const facts = { model: null, modelCount: 0, numLayers: 0, numHeads: 0, maxLength: 0, maxChars: Infinity, labels: [],
  attention: false }; // the chosen model's (facts.js)
let texts = []; // the texts last run
let shown = { answer: null, drawings: [] }; // what the views show now
let generation = 0; // each render's number: answers to an older one are dropped
let runs = 0; // each run's number: the labels of an older run are dropped too

function showMessage(text) {
  $("message").textContent = text;
  $("message").hidden = !text;
}

function fail(error) {
  if (error instanceof ApiError && error.status === 401) {
    $("key-form").hidden = false;
    $("api-key").focus();
  }
  showMessage(error.message);
  $("views").dataset.state = "error";
}

async function loadFacts() {
  try {
    served = await loadServed();
    useModel(facts.model);
    fillModels(served.models.map((m) => m.name));
    $("key-form").hidden = true;
    return true;
  } catch (error) {
    $("model-info").textContent = "The model's facts could not be loaded.";
    fail(error);
    return false;
  }
}

// Takes the facts of the model called `name` (the default one when none is): the layer and head pickers
// list its layers and heads (the layer and head chosen are kept where it has them), its line is shown, and
// the answers of the model before are cleared.
function useModel(name) {
  Object.assign(facts, factsOf(served, name));
  settings.layer = Math.max(0, Math.min(settings.layer, facts.numLayers - 1));
  settings.head = Math.max(0, Math.min(settings.head, facts.numHeads - 1));
  fillSelect($("layer"), facts.numLayers, settings.layer);
  fillSelect($("head"), facts.numHeads, settings.head);
  $("model-info").textContent = describe(facts);
  $("answers").replaceChildren();
  syncControls();
}

function fillModels(names) {
  $("model-box").hidden = names.length < 2;
  $("model").replaceChildren(...names.map((name) => new Option(name, name, false, name === facts.model)));
}

function fillSelect(select, count, chosen) {
  select.replaceChildren(...Array.from({ length: count }, (_, i) => new Option(String(i), String(i), false, i === chosen)));
}

function currentTexts() {
  const chosen = [$("text-a").value];
  if ($("compare").checked) chosen.push($("text-b").value);
  return chosen;
}

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
  const mine = ++runs;
  showMessage("");
  $("run").disabled = true;
  try {
    const [answers] = await Promise.all([classify(chosen, facts), render()]);
    if (mine === runs) showAnswers($("answers"), chosen, answers, facts.model);
  } catch (error) {
    if (mine !== runs) return;
    $("answers").replaceChildren();
    fail(error);
  } finally {
    if (mine === runs) $("run").disabled = false;
  }
}

async function render() {
  if (texts.length === 0) return;
  const mine = ++generation;
  if (!facts.attention) {
    showUnavailable();
    return;
  }
  $("views").dataset.state = "loading";
  let answer;
  try {
    answer = await fetchAttention(attentionBody(settings, texts), facts);
  } catch (error) {
    if (mine === generation) throw error;
    return; // a newer render is under way: its outcome is the one to show
  }
  if (mine !== generation) return;
  const panels = makePanels($("views"), texts, answer.items, settings.hideSpecial);
  shown = { answer, drawings: draw(settings, facts, answer, panels, openInHeatmap) };
  Object.assign($("views").dataset, { state: "ready", view: settings.view, title: mapTitle(settings, facts),
    model: facts.model });
}

// The model chosen has no attention graph: no /attention request, a note where the views would be.
function showUnavailable() {
  const note = document.createElement("p");
  note.className = "note";
  note.textContent = `The model ${facts.model} has no attention graph (its bundle was exported without one):`
    + ` there is no attention to show.${facts.labels.length ? " Its labels for the text are above." : ""}`;
  $("views").replaceChildren(note);
  shown = { answer: null, drawings: [] };
  Object.assign($("views").dataset, { state: "unavailable", view: settings.view, title: "", model: facts.model });
}

function rerender() {
  render().then(() => showMessage(""), fail);
}

function openInHeatmap(layer, head) {
  Object.assign(settings, { layer, head, combine: "none" });
  syncControls();
  selectTab("heatmap");
}

function syncControls() {
  $("layer").value = String(settings.layer);
  $("head").value = String(settings.head);
  $("combine").value = settings.combine;
  const none = !facts.attention;
  $("layer").disabled = none || settings.combine === "rollout" || settings.view === "grid";
  $("head").disabled = none || settings.combine !== "none" || settings.view === "grid";
  $("combine").disabled = none || settings.view === "grid";
  $("renormalise").disabled = none || !settings.hideSpecial;
  $("export-png").disabled = none;
  $("export-json").disabled = none;
}

function selectTab(view) {
  settings.view = view;
  for (const tab of document.querySelectorAll("[role=tab]")) {
    const on = tab.dataset.view === view;
    tab.setAttribute("aria-selected", String(on));
    tab.tabIndex = on ? 0 : -1;
    if (on) $("views").setAttribute("aria-labelledby", tab.id);
  }
  syncControls();
  rerender();
}

function onTabKey(event) {
  const tabs = [...document.querySelectorAll("[role=tab]")];
  const at = tabs.indexOf(document.activeElement);
  const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
  if (at < 0 || !step) return;
  event.preventDefault();
  const next = tabs[(at + step + tabs.length) % tabs.length];
  next.focus();
  selectTab(next.dataset.view);
}

function exportPng() {
  shown.drawings.forEach((drawing, i) => downloadCanvas(drawing.canvas, `attention-${settings.view}-${i + 1}.png`));
}

function exportJson() {
  if (shown.answer) downloadText(shown.answer.text, `attention-${settings.view}.json`);
}

function wire() {
  $("text-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
  for (const id of ["text-a", "text-b"]) {
    $(id).addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(); }
    });
  }
  $("compare").addEventListener("change", () => { $("text-b-box").hidden = !$("compare").checked; });
  $("key-form").addEventListener("submit", (e) => { e.preventDefault(); useKey(); });
  $("model").addEventListener("change", () => { useModel($("model").value); run(); });
  $("tabs").addEventListener("keydown", onTabKey);
  for (const tab of document.querySelectorAll("[role=tab]")) tab.addEventListener("click", () => selectTab(tab.dataset.view));
  const controls = { layer: (v) => ({ layer: Number(v) }), head: (v) => ({ head: Number(v) }), combine: (v) => ({ combine: v }) };
  for (const [id, change] of Object.entries(controls)) {
    $(id).addEventListener("change", () => { Object.assign(settings, change($(id).value)); syncControls(); rerender(); });
  }
  for (const [id, name] of [["hide-special", "hideSpecial"], ["renormalise", "renormalise"]]) {
    $(id).addEventListener("change", () => { settings[name] = $(id).checked; syncControls(); rerender(); });
  }
  $("export-png").addEventListener("click", exportPng);
  $("export-json").addEventListener("click", exportJson);
}

async function useKey() {
  setApiKey($("api-key").value.trim());
  $("api-key").value = "";
  showMessage("");
  if (await loadFacts()) run();
}

wire();
syncControls();
loadFacts().then((ok) => { if (ok) run(); });
