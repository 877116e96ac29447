// @ts-check
// The page's link: `/explore?text=...&compare=...&model=...&task=...` opens with its texts run on its model and
// task, and after each run the address bar is made to say what was run, so it can be copied and opens the same run.

/** @typedef {import("./facts.js").Facts} Facts */

/**
 * What the link asks for.
 * @typedef {object} Linked
 * @property {string | null} text the first text; null: the box keeps its example
 * @property {string | null} compare a second text; null: none
 * @property {string} model "" for none: the server's default
 * @property {string} task "" for none: the bare base model
 */

/** @returns {Linked} */
export function readLink() {
  const params = new URLSearchParams(location.search);
  return { text: params.get("text"), compare: params.get("compare"), model: params.get("model") ?? "",
    task: params.get("task") ?? "" };
}

/**
 * The address bar made to name the texts run (`&compare=...` for a second text), the model when several are served
 * and the task when one is chosen.
 * @param {string[]} texts
 * @param {Facts} facts
 */
export function keepLink(texts, facts) {
  const params = new URLSearchParams({ text: texts[0] });
  if (texts.length > 1) params.set("compare", texts[1]);
  if (facts.modelCount > 1) params.set("model", facts.model);
  if (facts.task) params.set("task", facts.task);
  history.replaceState(null, "", `${location.pathname}?${params}`);
}

/**
 * What of the link's choices could not be taken ("" when all were): a model the server does not serve, a task
 * the model shown does not have.
 * @param {Linked} linked
 * @param {Facts} facts the model and task shown
 */
export function linkProblem(linked, facts) {
  const model = linked.model && facts.model !== linked.model
    ? `The link names the model "${linked.model}", which this server does not serve; showing ${facts.model}.` : "";
  const task = linked.task && facts.task !== linked.task
    ? `The link names the task "${linked.task}", which ${facts.model} does not have; showing the base model.` : "";
  return [model, task].filter(Boolean).join(" ");
}
