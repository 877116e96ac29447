// @ts-check
// Calls to this service's own routes. The API key, when the user gave one, is kept in this tab's
// session storage and sent as `Authorization: Bearer`. A non-2xx answer becomes an ApiError that
// carries the server's message from its one error body {"error": {"message", "type", "code"}}.

const KEY_NAME = "attnserve.apiKey";

/** A call that failed: the HTTP status (0: no answer), the message to show, the error body's code. */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} message
   * @param {string} code
   */
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY_NAME) || "";
}

/** @param {string} key "" forgets the key */
export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_NAME, key);
  else sessionStorage.removeItem(KEY_NAME);
}

/** @param {boolean} withBody */
function headers(withBody) {
  /** @type {Record<string, string>} */
  const result = { Accept: "application/json" };
  if (withBody) result["Content-Type"] = "application/json";
  const key = apiKey();
  if (key) result.Authorization = `Bearer ${key}`;
  return result;
}

/**
 * @param {number} status
 * @param {string} text the answer's body
 * @param {string} path
 */
function errorOf(status, text, path) {
  try {
    const { message, code } = JSON.parse(text).error;
    return new ApiError(status, `${path}: ${message} (HTTP ${status})`, code);
  } catch {
    return new ApiError(status, `${path}: the server answered HTTP ${status}`, "http_error");
  }
}

/**
 * GET `path`, or POST `body` to it as JSON. Returns the parsed answer, for the caller to read as the route's
 * type, and the exact text it came from (for export); throws ApiError.
 * @param {string} path
 * @param {object} [body]
 * @returns {Promise<{json: unknown, text: string}>}
 */
export async function call(path, body) {
  let response;
  try {
    response = await fetch(path, {
      method: body === undefined ? "GET" : "POST",
      headers: headers(body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    throw new ApiError(0, `${path}: the server could not be reached (${reason})`, "network");
  }
  const text = await response.text();
  if (!response.ok) throw errorOf(response.status, text, path);
  return { json: JSON.parse(text), text };
}

/**
 * `body` naming the model only when there is a choice (with one model the TEI-shaped routes, which refuse unknown
 * fields, get no `model` field), and the task (one of the model's LoRA adapters) only when one is chosen: without
 * `task` the bare base model runs.
 * @template {object} T
 * @param {T} body
 * @param {string} model
 * @param {number} modelCount
 * @param {string} [task] "" for none
 * @returns {T & {model?: string, task?: string}}
 */
export function withModel(body, model, modelCount, task = "") {
  return { ...body, ...(modelCount > 1 && model ? { model } : {}), ...(task ? { task } : {}) };
}
