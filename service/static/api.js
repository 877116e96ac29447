// Calls to this service's own routes. The API key, when the user gave one, is kept in this tab's
// session storage and sent as `Authorization: Bearer`. A non-2xx answer becomes an ApiError that
// carries the server's message from its one error body {"error": {"message", "type", "code"}}.

const KEY_NAME = "attnserve.apiKey";

export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY_NAME) || "";
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_NAME, key);
  else sessionStorage.removeItem(KEY_NAME);
}

function headers(withBody) {
  const result = { Accept: "application/json" };
  if (withBody) result["Content-Type"] = "application/json";
  const key = apiKey();
  if (key) result.Authorization = `Bearer ${key}`;
  return result;
}

function errorOf(status, text, path) {
  try {
    const { message, code } = JSON.parse(text).error;
    return new ApiError(status, `${path}: ${message} (HTTP ${status})`, code);
  } catch {
    return new ApiError(status, `${path}: the server answered HTTP ${status}`, "http_error");
  }
}

// Returns {json, text}: the parsed answer and the exact text it came from (for export).
export async function call(path, body) {
  let response;
  try {
    response = await fetch(path, {
      method: body === undefined ? "GET" : "POST",
      headers: headers(body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(0, `${path}: the server could not be reached (${err.message})`, "network");
  }
  const text = await response.text();
  if (!response.ok) throw errorOf(response.status, text, path);
  return { json: JSON.parse(text), text };
}

// The request bodies name the model only when there is a choice: with one model the TEI-shaped routes
// (which refuse unknown fields) get no `model` field.
export function withModel(body, model, modelCount) {
  return modelCount > 1 && model ? { ...body, model } : body;
}
