// @ts-check
// The served models and the one chosen: their facts loaded from /info, and the controls and messages kept in
// step with the model and task chosen (its layers, heads and labels; whether it has attention; its tasks, the LoRA
// adapters a request may run instead of the bare base; whether it has token vectors, which show the MaxSim view).

import { syncControls } from "./attentionviews.js";
import { describe, factsOf, layerKind, loadServed } from "./facts.js";
import { useInputsOf } from "./imageform.js";
import { clearMaxSim } from "./maxsimform.js";
import { fail } from "./messages.js";
import { ui } from "./page.js";
import { facts, settings, state } from "./state.js";

/** The served models' facts, from /info; false (and a message) when they could not be loaded. */
export async function loadFacts() {
  try {
    state.served = await loadServed();
    useModel(facts.key || facts.model);
    fillModels(state.served.models.map((m) => m.key ?? m.name));
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
 * @param {string} name its entry in the picker (`Facts.key`)
 * @param {string} [task] "" for none: the bare base model
 */
export function useModel(name, task = facts.task) {
  Object.assign(facts, factsOf(state.served, name, task));
  settings.layer = Math.max(0, Math.min(settings.layer, facts.numLayers - 1));
  settings.head = Math.max(0, Math.min(settings.head, facts.numHeads - 1));
  fillSelect(ui.layer, facts.numLayers, settings.layer, (i) => layerKind(facts, i));
  fillSelect(ui.head, facts.numHeads, settings.head);
  fillTasks();
  useInputsOf(facts);
  ui.modelInfo.textContent = describe(facts);
  ui.answers.replaceChildren();
  clearMaxSim();
  syncControls();
}

/** @param {string[]} names */
function fillModels(names) {
  ui.modelBox.hidden = names.length < 2;
  ui.model.replaceChildren(...names.map((name) => new Option(name, name, false, name === facts.key)));
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
