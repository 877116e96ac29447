// @ts-check
// An image model's map drawn on the image: the picture as the model reads it (scaled to cover its height x width and
// centre-cropped, as the crop processors prepare it; a processor that resizes without cropping stretches instead, so
// there the picture is a guide, the grid exact), and over its patch grid one row of the map as a heat overlay: how
// much the chosen token (the class token, or a patch clicked) attends to each patch, coloured on [0, the row's
// largest patch value]. Clicking a patch (or moving to one with the arrow keys) shows that patch's row: where it
// looks; clicking it again (or Escape) goes back to the class token. The overlay is its own canvas of plain colours
// (shown translucent by CSS) whose data-* attributes carry what it drew: the grid, where its cells are, the token
// whose row it is and the values, for tests and scripts.

import { blankCanvas, context2d } from "./canvas.js";
import { TABLE, drawColourBar, formatValue, level } from "./colormap.js";
import { mapAt } from "./matrix.js";

/** @typedef {import("./matrix.js").Item} Item */
/** @typedef {import("./views.js").PatchGrid} PatchGrid */

/**
 * What show() drew: the grid, the token whose row it is, its name, the row's patch values (rows x cols, row-major),
 * their maximum, a cell's side in CSS pixels and the map's title.
 * @typedef {{grid: PatchGrid, query: number, name: string, values: Float32Array, max: number, cell: number,
 *   title: string}} Shown
 */

const BAR_SPACE = 90; // colour bar and its labels
const MAX_SIDE = 560; // the picture's longer side at most, CSS pixels
const OUTLINE = "#ffffff"; // the chosen patch's frame

export class Patches {
  /**
   * @param {HTMLElement} figure
   * @param {HTMLElement} readout
   * @param {(token: number | null) => void} onQuery a token chosen (null: back to the class token)
   */
  constructor(figure, readout, onQuery) {
    const stack = document.createElement("div");
    stack.className = "patches";
    this.base = document.createElement("canvas");
    this.overlay = document.createElement("canvas");
    this.overlay.className = "overlay";
    this.overlay.tabIndex = 0;
    this.overlay.setAttribute("role", "img");
    stack.append(this.base, this.overlay);
    figure.append(stack);
    this.readout = readout;
    this.onQuery = onQuery;
    /** @type {Shown | null} */
    this.shown = null;
    this.overlay.addEventListener("mousemove", (e) => this.pointAt(e.offsetX, e.offsetY));
    this.overlay.addEventListener("click", (e) => this.pick(this.patchAt(e.offsetX, e.offsetY)));
    this.overlay.addEventListener("keydown", (e) => this.onKey(e));
  }

  /**
   * @param {HTMLImageElement} picture the image given, decoded
   * @param {PatchGrid} grid
   * @param {Item} item the image's /attention item (one map: a head, heads mixed, or the rollout)
   * @param {number} query the token whose row is drawn
   * @param {string} title names the map
   * @param {number} width CSS pixels available
   */
  show(picture, grid, item, query, title, width) {
    const scale = Math.min((width - BAR_SPACE) / grid.width, MAX_SIDE / Math.max(grid.width, grid.height));
    const values = patchRow(item, grid, query);
    const max = values.reduce((a, b) => Math.max(a, b), 0);
    const name = item.tokens[query].text;
    this.shown = { grid, query, name, values, max, cell: grid.patch_size * scale, title };
    drawBase(this.base, picture, grid, scale, max);
    drawOverlay(this.overlay, this.shown);
    this.overlay.setAttribute("aria-label", `${title}: where ${name} looks, over ${grid.rows} × ${grid.cols} patches`);
    this.readout.textContent = summary(this.shown);
  }

  /** The picture and the overlay in one canvas (what Export PNG saves). */
  get canvas() {
    const out = document.createElement("canvas");
    Object.assign(out, { width: this.base.width, height: this.base.height });
    const ctx = context2d(out);
    ctx.drawImage(this.base, 0, 0);
    ctx.globalAlpha = 0.6;
    ctx.drawImage(this.overlay, 0, 0);
    return out;
  }

  /**
   * The patch under (x, y) CSS pixels of the overlay, as its token index; null off the grid.
   * @param {number} x
   * @param {number} y
   */
  patchAt(x, y) {
    if (!this.shown) return null;
    const { grid, cell } = this.shown;
    const row = Math.floor(y / cell);
    const col = Math.floor(x / cell);
    return row >= 0 && row < grid.rows && col >= 0 && col < grid.cols ? grid.first + row * grid.cols + col : null;
  }

  /**
   * @param {number} x
   * @param {number} y
   */
  pointAt(x, y) {
    const token = this.patchAt(x, y);
    if (!this.shown || token === null) return;
    const { values, name, grid } = this.shown;
    const value = values[token - grid.first];
    this.readout.textContent = `${name} → ${patchName(grid, token)} = ${formatValue(value)}`;
    Object.assign(this.readout.dataset, { query: this.shown.query, key: token, value });
  }

  /** @param {number | null} token a patch clicked; the patch shown again (or none) goes back to the class token */
  pick(token) {
    if (token !== null) this.onQuery(token === this.shown?.query ? null : token);
  }

  /** @param {KeyboardEvent} event arrows move the chosen patch, Escape goes back to the class token */
  onKey(event) {
    if (!this.shown) return;
    if (event.key === "Escape") {
      event.preventDefault();
      this.onQuery(null);
      return;
    }
    /** @type {Record<string, [number, number]>} */
    const steps = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    const step = steps[event.key];
    if (!step) return;
    event.preventDefault();
    const { grid, query } = this.shown;
    const at = Math.max(0, query - grid.first); // from the class token: the first patch
    const row = Math.max(0, Math.min(grid.rows - 1, Math.floor(at / grid.cols) + step[0]));
    const col = Math.max(0, Math.min(grid.cols - 1, (at % grid.cols) + step[1]));
    this.onQuery(grid.first + row * grid.cols + col);
  }
}

/**
 * Row `query` of the item's one map, over the patches only: (rows x cols) values, row-major.
 * @param {Item} item
 * @param {PatchGrid} grid
 * @param {number} query
 */
export function patchRow(item, grid, query) {
  const n = item.tokens.length;
  const start = query * n + grid.first;
  return Float32Array.from(mapAt(item, 0).subarray(start, start + grid.rows * grid.cols));
}

/**
 * "patch row,col" of a patch's token, the token's own name otherwise.
 * @param {PatchGrid} grid
 * @param {number} token
 */
function patchName(grid, token) {
  const at = token - grid.first;
  return at < 0 ? `token ${token}` : `patch ${Math.floor(at / grid.cols)},${at % grid.cols}`;
}

/**
 * The picture scaled to cover the model's height x width and centre-cropped, and the colour bar beside it.
 * @param {HTMLCanvasElement} canvas
 * @param {HTMLImageElement} picture
 * @param {PatchGrid} grid
 * @param {number} scale CSS pixels per model pixel
 * @param {number} max the colour bar's top
 */
function drawBase(canvas, picture, grid, scale, max) {
  const dpr = window.devicePixelRatio || 1;
  const width = grid.width * scale;
  const height = grid.height * scale;
  const cover = Math.max(grid.width / picture.naturalWidth, grid.height / picture.naturalHeight);
  const sw = grid.width / cover;
  const sh = grid.height / cover; // the part of the picture the model reads, in its own pixels
  const drawn = blankCanvas(width + BAR_SPACE, height, dpr);
  const ctx = context2d(drawn);
  ctx.drawImage(picture, (picture.naturalWidth - sw) / 2, (picture.naturalHeight - sh) / 2, sw, sh, 0, 0, width, height);
  ctx.font = "12px system-ui, 'DejaVu Sans', sans-serif";
  drawColourBar(ctx, width + 12, 6, Math.max(height - 12, 40), max);
  Object.assign(canvas, { width: drawn.width, height: drawn.height });
  canvas.style.width = `${width + BAR_SPACE}px`;
  canvas.style.height = `${height}px`;
  context2d(canvas).drawImage(drawn, 0, 0);
}

/**
 * The row's value of each patch as a cell of the colour scale, the chosen patch framed; its data-* attributes say
 * what was drawn and where.
 * @param {HTMLCanvasElement} canvas
 * @param {Shown} shown
 */
function drawOverlay(canvas, { grid, query, name, values, max, cell, title }) {
  const dpr = window.devicePixelRatio || 1;
  Object.assign(canvas, { width: Math.round(grid.cols * cell * dpr), height: Math.round(grid.rows * cell * dpr) });
  canvas.style.width = `${grid.cols * cell}px`;
  canvas.style.height = `${grid.rows * cell}px`;
  const ctx = context2d(canvas);
  ctx.scale(dpr, dpr);
  values.forEach((value, k) => {
    const t = 3 * level(value, max);
    ctx.fillStyle = `rgb(${TABLE[t]}, ${TABLE[t + 1]}, ${TABLE[t + 2]})`;
    ctx.fillRect((k % grid.cols) * cell, Math.floor(k / grid.cols) * cell, cell, cell);
  });
  const at = query - grid.first;
  if (at >= 0) {
    ctx.strokeStyle = OUTLINE;
    ctx.lineWidth = 2;
    ctx.strokeRect((at % grid.cols) * cell + 1, Math.floor(at / grid.cols) * cell + 1, cell - 2, cell - 2);
  }
  Object.assign(canvas.dataset, { rows: grid.rows, cols: grid.cols, first: grid.first, cell, query, token: name, max,
    title, values: Array.from(values).join(",") });
}

/** @param {Shown} shown */
function summary({ grid, query, name, values, max, title }) {
  const best = values.indexOf(max);
  const start = grid.class_token ? "the class token" : "the first patch";
  const from = query === defaultQuery(grid) ? start : name;
  const back = query === defaultQuery(grid) ? "" : `; click it again or press Escape for ${start}`;
  return `${title} · where ${from} looks: most at ${patchName(grid, grid.first + best)} (${formatValue(max)}).`
    + ` Click a patch to see where it looks${back}.`;
}

/**
 * The token whose row is drawn until a patch is chosen: the class token, or the first patch where there is none.
 * @param {PatchGrid} grid
 */
export function defaultQuery(grid) {
  return grid.class_token ? 0 : grid.first;
}
