// @ts-check
// The page's one message line: every failure (a 4xx/5xx answer, a text over a cap, no server) ends there, and a
// 401 opens the API key form too.

import { ApiError } from "./api.js";
import { ui } from "./page.js";

/** @param {string} text "" hides the message */
export function showMessage(text) {
  ui.message.textContent = text;
  ui.message.hidden = !text;
}

/** @param {unknown} error */
export function fail(error) {
  if (error instanceof ApiError && error.status === 401) {
    ui.keyForm.hidden = false;
    ui.apiKey.focus();
  }
  showMessage(error instanceof Error ? error.message : String(error));
  ui.views.dataset.state = "error";
}
