// @ts-check
// An image model's input: a file picked (#image-file) or dropped on the image box (#image-form), read as a data URI,
// which /attention takes as it is (the server checks the bytes and names what it accepts: PNG, JPEG, WebP, GIF).
// The page shows this box in place of the texts for a model that reads images only (GET /info: `modalities`), and
// hides the views that are about texts (the grid of heads, the lines).

import { fail } from "./messages.js";
import { ui } from "./page.js";
import { state } from "./state.js";

/** @typedef {import("./facts.js").Facts} Facts */

/**
 * Listens to the file input and to drops on the image box; `onImage` runs once the image is read.
 * @param {() => void} onImage
 */
export function wireImage(onImage) {
  ui.imageFile.addEventListener("change", () => take(ui.imageFile.files?.[0], onImage));
  ui.imageForm.addEventListener("submit", (e) => e.preventDefault());
  ui.imageForm.addEventListener("dragover", (e) => {
    e.preventDefault(); // without it the browser opens the dropped file itself
    ui.imageForm.classList.add("over");
  });
  ui.imageForm.addEventListener("dragleave", () => ui.imageForm.classList.remove("over"));
  ui.imageForm.addEventListener("drop", (e) => {
    e.preventDefault();
    ui.imageForm.classList.remove("over");
    ui.imageFile.value = ""; // the file input names the file it was given, not a dropped one
    take(e.dataTransfer?.files[0], onImage);
  });
}

/**
 * The inputs the model reads shown (the image box, or the texts; the model picker either way), and the patch chosen
 * forgotten: another model has another grid.
 * @param {Facts} facts
 */
export function useInputsOf(facts) {
  ui.texts.hidden = facts.images;
  ui.textActions.hidden = facts.images;
  ui.imageForm.hidden = !facts.images;
  ui.tabs.hidden = facts.images;
  state.query = null;
}

/**
 * @param {File | undefined} file
 * @param {() => void} onImage
 */
function take(file, onImage) {
  if (file === undefined) return;
  readAsDataUri(file).then((uri) => {
    state.image = { uri, name: file.name };
    state.query = null;
    onImage();
  }, fail);
}

/**
 * @param {File} file
 * @returns {Promise<string>}
 */
function readAsDataUri(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result));
    reader.onerror = () => reject(new Error(`${file.name} could not be read (${reader.error?.message ?? "unknown"})`));
    reader.readAsDataURL(file);
  });
}
