// @ts-check
// The page's link: `/explore?text=...&compare=...&model=...&task=...` opens with its texts run on its model and
// task (`&query=...&document=...`: and the MaxSim view's pair, for a multi-vector model), and after each run the
// address bar is made to say what was run, so it can be copied and opens the same run.

/** @typedef {import("./facts.js").Facts} Facts */

/**
 * What the link asks for.
 * @typedef {object} Linked
 * @property {string | null} text the first text; null: the box keeps its example
 * @property {string | null} compare a second text; null: none
 * @property {string} model "" for none: the server's default
 * @property {string} task "" for none: the bare base model
 * @property {Pair | null} pair the MaxSim view's query and document; null: none (both are needed)
 */

/** @typedef {{query: string, document: string}} Pair a MaxSim view's inputs */

/** @returns {Linked} */
export function readLink() {
  const params = new URLSearchParams(location.search);
  return { text: params.get("text"), compare: params.get("compare"), model: params.get("model") ?? "",
    task: params.get("task") ?? "", pair: pairOf(params.get("query"), params.get("document")) };
}

/**
 * @param {string | null} query
 * @param {string | null} document
 * @returns {Pair | null}
 */
function pairOf(query, document) {
  return query === null || document === null ? null : { query, document };
}

/**
 * The address bar made to name the texts run (`&compare=...` for a second text), the model when several are served
 * and the task when one is chosen, and the MaxSim view's query and document when it drew them.
 * @param {string[]} texts
 * @param {Facts} facts
 * @param {Pair | null} [pair]
 */
export function keepLink(texts, facts, pair = null) {
  const params = new URLSearchParams({ text: texts[0] });
  if (texts.length > 1) params.set("compare", texts[1]);
  if (facts.modelCount > 1) params.set("model", facts.model);
  if (facts.task) params.set("task", facts.task);
  if (pair) {
    params.set("query", pair.query);
    params.set("document", pair.document);
  }
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
