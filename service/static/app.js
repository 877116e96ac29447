// The attention explorer: loads the model's facts, runs the texts, and keeps the controls, the views and
// the messages in step. Every failure (a 4xx/5xx answer, a text over a cap, no server) ends as a message
// on the page; nothing is left blank. #views carries data-state="loading" | "ready" | "error".

import { ApiError, call, models, setApiKey } from "./api.js";
import { classify, showAnswers } from "./answers.js";
import { downloadCanvas, downloadText } from "./exporter.js";
import { attentionBody, draw, fetchAttention, makePanels, mapTitle } from "./views.js";

const $ = (id) => document.getElementById(id);
const settings = { view: "heatmap", layer: 0, head: 0, combine: "none", hideSpecial: false, renormalise: false };
const facts = { model: null, modelCount: 0, numLayers: 0, numHeads: 0, maxLength: 0, maxChars: Infinity, labels: [] };
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
    const ids = await models();
    facts.modelCount = ids.length;
    facts.model = facts.model && ids.includes(facts.model) ? facts.model : ids[0];
    fillModels(ids);
    const { json: info } = await call("/info");
    Object.assign(facts, { numLayers: info.num_layers, numHeads: info.num_heads, maxLength: info.max_length,
      maxChars: info.limits.max_input_chars, labels: info.labels });
    fillSelect($("layer"), facts.numLayers, settings.layer);
    fillSelect($("head"), facts.numHeads, settings.head);
    $("model-info").textContent = `${info.model} · ${info.num_layers} layers × ${info.num_heads} heads`
      + ` · up to ${info.max_length} tokens${info.labels.length ? ` · labels: ${info.labels.join(", ")}` : ""}`;
    $("key-form").hidden = true;
    return true;
  } catch (error) {
    $("model-info").textContent = "The model's facts could not be loaded.";
    fail(error);
    return false;
  }
}

function fillModels(ids) {
  $("model-box").hidden = ids.length < 2;
  $("model").replaceChildren(...ids.map((id) => new Option(id, id, false, id === facts.model)));
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
  if (facts.numLayers === 0 && !(await loadFacts())) return;
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
    if (mine === runs) showAnswers($("answers"), chosen, answers);
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
  Object.assign($("views").dataset, { state: "ready", view: settings.view, title: mapTitle(settings, facts) });
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
  $("layer").disabled = settings.combine === "rollout" || settings.view === "grid";
  $("head").disabled = settings.combine !== "none" || settings.view === "grid";
  $("combine").disabled = settings.view === "grid";
  $("renormalise").disabled = !settings.hideSpecial;
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
  $("model").addEventListener("change", () => { facts.model = $("model").value; run(); });
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
