// @ts-check
// The attention views and their controls: the texts last run drawn as the view, layer, head and head
// combination chosen (the tabs, the pickers, the options), drawn again when a control changes, and exported as
// PNG or JSON. #views carries data-state="loading" | "ready" | "error" | "unavailable" (the model chosen has no
// attention graph) and, once drawn, data-model and data-task: the model its views are of, and its task ("" for
// the bare base). An image model's view is imageview.js's, drawn with the same controls.

import { downloadCanvas, downloadText } from "./exporter.js";
import { renderImage } from "./imageview.js";
import { fail, showMessage } from "./messages.js";
import { tabs, ui } from "./page.js";
import { facts, settings, state } from "./state.js";
import { attentionBody, draw, fetchAttention, makePanels, mapTitle } from "./views.js";

/** @typedef {import("./views.js").Settings} Settings */
/** @typedef {import("./views.js").ViewName} ViewName */
/** @typedef {import("./views.js").Combine} Combine */

let generation = 0; // each render's number: answers to an older one are dropped

export async function render() {
  if (facts.images) {
    await renderImage();
    return;
  }
  if (state.texts.length === 0) return;
  const mine = ++generation;
  if (!facts.attention) {
    showUnavailable();
    return;
  }
  ui.views.dataset.state = "loading";
  let answer;
  try {
    answer = await fetchAttention(attentionBody(settings, state.texts), facts);
  } catch (error) {
    if (mine === generation) throw error;
    return; // a newer render is under way: its outcome is the one to show
  }
  if (mine !== generation) return;
  const panels = makePanels(ui.views, state.texts, answer.items, settings.hideSpecial);
  state.shown = { answer, drawings: draw(settings, facts, answer, panels, openInHeatmap) };
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
  state.shown = { answer: null, drawings: [] };
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

export function syncControls() {
  ui.layer.value = String(settings.layer);
  ui.head.value = String(settings.head);
  ui.combine.value = settings.combine;
  const none = !facts.attention;
  const grid = settings.view === "grid" && !facts.images; // an image model's one view draws one map
  ui.layer.disabled = none || settings.combine === "rollout" || grid;
  ui.head.disabled = none || settings.combine !== "none" || grid;
  ui.combine.disabled = none || grid;
  ui.hideSpecial.disabled = facts.images; // the image view draws the patches only
  ui.renormalise.disabled = none || facts.images || !settings.hideSpecial;
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
  state.shown.drawings.forEach((drawing, i) => downloadCanvas(drawing.canvas, `attention-${settings.view}-${i + 1}.png`));
}

function exportJson() {
  if (state.shown.answer) downloadText(state.shown.answer.text, `attention-${settings.view}.json`);
}

/** @param {Partial<Settings>} change */
function changeSettings(change) {
  Object.assign(settings, change);
  syncControls();
  rerender();
}

// The view controls listened to: the tabs (click, arrow keys), the pickers, the options and the exports.
export function wireViews() {
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
