// @ts-check
// The image view: an image model's map of the image last given, as the controls choose it (a head of a layer, the
// heads of a layer mixed, or the rollout over every layer), drawn on the image by patches.js in one panel of #views.
// /attention is asked for that one map, whose every row the view can show: choosing another patch redraws without
// asking again. #views carries data-state "idle" (an image model, no image given yet), "loading", "ready" or
// "error", data-view "image", and once drawn data-title and data-model as the text views do.

import { fail, showMessage } from "./messages.js";
import { ui } from "./page.js";
import { Patches, defaultQuery } from "./patches.js";
import { facts, settings, state } from "./state.js";
import { attentionBody, element, fetchAttention, mapTitle } from "./views.js";

/** @typedef {import("./views.js").Answer} Answer */
/** @typedef {import("./views.js").PatchGrid} PatchGrid */

let generation = 0; // each render's number: answers to an older one are dropped
/** @type {{uri: string, picture: HTMLImageElement} | null} the image last decoded, kept while it is the one given */
let decoded = null;

/** Draws the image given (a message on failure); with none yet, says how to give one. */
export async function showImage() {
  showMessage("");
  try {
    await renderImage();
  } catch (error) {
    fail(error);
  }
}

/** Asks /attention for the map the controls choose, of the image given, and draws it; throws what fails. */
export async function renderImage() {
  const image = state.image;
  if (image === null) {
    showIdle();
    return;
  }
  const mine = ++generation;
  ui.views.dataset.state = "loading";
  const body = attentionBody({ ...settings, view: "heatmap" }, [image.uri]);
  const answer = await fetchAttention(body, facts); // the server's refusal first: it names what is accepted
  const picture = await pictureOf(image.uri);
  if (mine !== generation || answer.grid === null) return;
  draw(answer, answer.grid, picture, image.name);
}

/**
 * @param {Answer} answer
 * @param {PatchGrid} grid
 * @param {HTMLImageElement} picture
 * @param {string} name the image's file name
 */
function draw(answer, grid, picture, name) {
  const item = answer.items[0];
  const query = state.query !== null && state.query < item.tokens.length ? state.query : defaultQuery(grid);
  const { panel, figure, readout } = imagePanel(name, grid, item.tokens.length);
  const title = mapTitle(settings, facts);
  const patches = new Patches(figure, readout, (token) => {
    state.query = token;
    patches.show(picture, grid, item, token ?? defaultQuery(grid), title, width(figure));
  });
  ui.views.replaceChildren(panel);
  patches.show(picture, grid, item, query, title, width(figure));
  state.shown = { answer, drawings: [patches] };
  Object.assign(ui.views.dataset, { state: "ready", view: "image", title, model: facts.model, task: facts.task });
}

/** @param {HTMLElement} figure */
function width(figure) {
  return Math.max(figure.clientWidth - 4, 320);
}

/**
 * A panel for the image: a heading, a note on its tokens and grid, a figure and a read-out.
 * @param {string} name
 * @param {PatchGrid} grid
 * @param {number} tokens
 */
function imagePanel(name, grid, tokens) {
  const panel = element("div", "panel");
  panel.dataset.image = name;
  const registers = grid.first - Number(grid.class_token);
  const lead = [grid.class_token ? "a class token" : "", registers ? `${registers} registers` : ""].filter(Boolean);
  const note = element("p", "note", `${tokens} tokens: ${[...lead, ""].join(", ")}${grid.rows} × ${grid.cols} patches of`
    + ` ${grid.patch_size} pixels, over the ${grid.width} × ${grid.height} pixels the model reads`);
  const figure = element("div", "figure");
  const readout = element("div", "readout");
  readout.setAttribute("aria-live", "polite");
  panel.append(element("h2", "", `Image: ${name}`), note, figure, readout);
  return { panel, figure, readout };
}

// An image model with no image given yet: where the views would be, how to give one.
function showIdle() {
  const note = element("p", "note", `${facts.model} reads images: pick an image file above, or drop one on the`
    + " box, to see where its class token and each patch look.");
  ui.views.replaceChildren(note);
  state.shown = { answer: null, drawings: [] };
  Object.assign(ui.views.dataset, { state: "idle", view: "image", title: "", model: facts.model, task: facts.task });
}

/**
 * The image of a data URI, decoded (kept while it is the image given).
 * @param {string} uri
 */
async function pictureOf(uri) {
  if (decoded?.uri !== uri) {
    const picture = new Image();
    picture.src = uri;
    await picture.decode().catch(() => { throw new Error("the browser could not decode this image to draw it"); });
    decoded = { uri, picture };
  }
  return decoded.picture;
}
