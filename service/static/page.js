// @ts-check
// The elements of explore.html that the explorer drives, found once and each checked to be what the code takes
// it for: a missing or changed element stops the page at start-up with its id, not later with "cannot read
// properties of null".

/**
 * @template {HTMLElement} T
 * @param {string} id
 * @param {{new (): T, name: string}} type
 * @returns {T}
 */
function byId(id, type) {
  const node = document.getElementById(id);
  if (!(node instanceof type)) throw new Error(`explore.html has no ${type.name} with id "${id}"`);
  return node;
}

export const ui = {
  modelInfo: byId("model-info", HTMLElement),
  keyForm: byId("key-form", HTMLFormElement),
  apiKey: byId("api-key", HTMLInputElement),
  textForm: byId("text-form", HTMLFormElement),
  texts: byId("texts", HTMLElement),
  textActions: byId("text-actions", HTMLElement),
  textA: byId("text-a", HTMLTextAreaElement),
  textB: byId("text-b", HTMLTextAreaElement),
  textBBox: byId("text-b-box", HTMLElement),
  modelBox: byId("model-box", HTMLElement),
  model: byId("model", HTMLSelectElement),
  taskBox: byId("task-box", HTMLElement),
  task: byId("task", HTMLSelectElement),
  compare: byId("compare", HTMLInputElement),
  imageForm: byId("image-form", HTMLFormElement),
  imageFile: byId("image-file", HTMLInputElement),
  run: byId("run", HTMLButtonElement),
  message: byId("message", HTMLElement),
  answers: byId("answers", HTMLElement),
  tabs: byId("tabs", HTMLElement),
  layer: byId("layer", HTMLSelectElement),
  combine: byId("combine", HTMLSelectElement),
  head: byId("head", HTMLSelectElement),
  hideSpecial: byId("hide-special", HTMLInputElement),
  renormalise: byId("renormalise", HTMLInputElement),
  exportPng: byId("export-png", HTMLButtonElement),
  exportJson: byId("export-json", HTMLButtonElement),
  views: byId("views", HTMLElement),
  maxsimBox: byId("maxsim-box", HTMLElement),
  maxsimForm: byId("maxsim-form", HTMLFormElement),
  maxsimQuery: byId("maxsim-query", HTMLTextAreaElement),
  maxsimDocument: byId("maxsim-document", HTMLTextAreaElement),
  maxsimRun: byId("maxsim-run", HTMLButtonElement),
  maxsimScore: byId("maxsim-score", HTMLElement),
  maxsim: byId("maxsim", HTMLElement),
  maxsimFigure: byId("maxsim-figure", HTMLElement),
  maxsimReadout: byId("maxsim-readout", HTMLElement),
};

/** The view tabs (the buttons of the tablist), in order. */
export function tabs() {
  return [...ui.tabs.querySelectorAll("button")];
}
