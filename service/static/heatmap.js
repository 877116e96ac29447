// @ts-check
// The token-by-token heatmap of one map: rows are queries, columns keys, token texts on both axes, the
// colour bar beside it; in a local layer the keys beyond each query's window are grey, so the band shows, and in a
// causal model's map every key after its query (the masked triangle). The pointer or the arrow keys choose a cell;
// the read-out under the canvas names both tokens and the value, and why a cell is masked (its data-* attributes
// carry the same, for tests and scripts).
// Drawn on one canvas from an n x n image scaled up, so 256 tokens cost one drawImage, not 65,536 nodes.

import { blankCanvas, context2d, viewCanvas } from "./canvas.js";
import { drawColourBar, formatValue, matrixImage } from "./colormap.js";
import { later, outsideWindow, reachInWords, tokenLabel } from "./matrix.js";

/** @typedef {import("./matrix.js").Token} Token */
/** @typedef {import("./matrix.js").View} View */

/**
 * Where things are on the canvas, in CSS pixels: the map's top-left corner, its cells' size and side.
 * @typedef {object} Layout
 * @property {number} m tokens shown
 * @property {number} cell
 * @property {number} left
 * @property {number} top
 * @property {number} side
 * @property {number} width
 * @property {number} height
 * @property {number} dpr
 * @property {number} labelEvery one axis label every this many tokens
 */

/** @typedef {{row: number, col: number}} Cell */

/**
 * What show() drew: the view, its title and layout, and the drawing without the selection (redrawn from).
 * @typedef {{view: View, title: string, layout: Layout, base: HTMLCanvasElement}} Drawn
 */

const FONT = "12px system-ui, 'DejaVu Sans', sans-serif";
const BAR_SPACE = 90; // colour bar and its labels
const MAX_LABEL = 110; // widest axis label, px

export class Heatmap {
  /**
   * @param {HTMLElement} figure
   * @param {HTMLElement} readout
   */
  constructor(figure, readout) {
    this.canvas = viewCanvas(figure);
    this.readout = readout;
    /** @type {Cell} */
    this.selected = { row: 0, col: 0 };
    /** @type {Drawn | null} */
    this.drawn = null;
    this.canvas.addEventListener("mousemove", (e) => this.pointAt(e.offsetX, e.offsetY));
    this.canvas.addEventListener("keydown", (e) => this.onKey(e));
  }

  /**
   * @param {View} view see matrix.viewOf
   * @param {string} title names the map
   * @param {number} width CSS pixels available
   */
  show(view, title, width) {
    const layout = layoutFor(view.tokens, width);
    this.drawn = { view, title, layout, base: renderBase(view, layout) };
    const { row, col } = this.selected;
    const m = view.tokens.length;
    this.selected = { row: Math.max(0, Math.min(row, m - 1)), col: Math.max(0, Math.min(col, m - 1)) };
    this.describe(this.drawn);
    this.redraw();
  }

  /** @param {Drawn} drawn */
  describe({ view, title, layout, base }) {
    const { left, top, cell, width, height } = layout;
    Object.assign(this.canvas.dataset, { left, top, cell, tokens: view.tokens.length });
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    this.canvas.width = base.width;
    this.canvas.height = base.height;
    const band = view.window === null ? "" : view.causal ? `Keys more than ${view.window} tokens before the query are `
      + "grey: not attended. " : `Keys beyond ±${view.window} tokens of the query are grey: not attended. `;
    const mask = view.causal ? "Keys after the query are grey: a causal model's token does not see later tokens. " : "";
    this.canvas.setAttribute("aria-label", `Attention heatmap, ${title}, ${view.tokens.length} tokens. `
      + `${mask}${band}Rows are queries, columns keys; the arrow keys move the read-out.`);
  }

  /**
   * @param {number} x
   * @param {number} y
   */
  pointAt(x, y) {
    if (!this.drawn) return;
    const { left, top, cell, m } = this.drawn.layout;
    const row = Math.floor((y - top) / cell);
    const col = Math.floor((x - left) / cell);
    if (row >= 0 && col >= 0 && row < m && col < m) this.select(row, col);
  }

  /** @param {KeyboardEvent} event */
  onKey(event) {
    /** @type {Record<string, [number, number]>} */
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1],
      PageUp: [-10, 0], PageDown: [10, 0], Home: [0, -Infinity], End: [0, Infinity] };
    const move = moves[event.key];
    const m = this.drawn ? this.drawn.view.tokens.length : 0;
    if (!move || m === 0) return;
    event.preventDefault();
    /** @param {number} v */
    const clamp = (v) => Math.max(0, Math.min(m - 1, v));
    this.select(clamp(this.selected.row + move[0]), clamp(this.selected.col + move[1]));
  }

  /**
   * @param {number} row
   * @param {number} col
   */
  select(row, col) {
    this.selected = { row, col };
    this.redraw();
  }

  redraw() {
    if (!this.drawn) return;
    const { view, layout, base } = this.drawn;
    const ctx = context2d(this.canvas);
    const dpr = layout.dpr;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.drawImage(base, 0, 0);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    drawSelection(ctx, layout, this.selected, view.tokens.length);
    this.updateReadout(this.drawn);
  }

  /** @param {Drawn} drawn */
  updateReadout({ view, title }) {
    const { row, col } = this.selected;
    const { tokens, indices, values } = view;
    if (tokens.length === 0) {
      this.readout.textContent = `${title}: no tokens left to show (all are special tokens)`;
      return;
    }
    const value = values[row * tokens.length + col];
    const query = tokens[row];
    const key = tokens[col];
    const outside = outsideWindow(view, row, col);
    const beyond = !outside ? "" : later(view, row, col) ? " (masked: a causal model's token does not see later tokens)"
      : ` (beyond the local window of ${reachInWords(Number(view.window), view.causal)}: not attended)`;
    this.readout.textContent = `${title} · query ${indices[row]} “${query.text}” → key ${indices[col]} “${key.text}”`
      + ` = ${formatValue(value)}${beyond}`;
    Object.assign(this.readout.dataset, { query: indices[row], key: indices[col], value: String(value),
      outside: String(outside) });
  }
}

/**
 * @param {Token[]} tokens
 * @param {number} width CSS pixels available
 * @returns {Layout}
 */
function layoutFor(tokens, width) {
  const m = tokens.length;
  const probe = context2d(document.createElement("canvas"));
  probe.font = FONT;
  const widest = Math.max(...tokens.map((t) => probe.measureText(tokenLabel(t)).width), 20);
  const margin = Math.ceil(Math.min(widest, MAX_LABEL)) + 8;
  const cell = Math.max(2, Math.min(28, Math.floor((width - margin - BAR_SPACE) / Math.max(m, 1))));
  const side = m * cell;
  const dpr = window.devicePixelRatio || 1;
  return { m, cell, left: margin, top: margin, side, width: margin + side + BAR_SPACE, height: margin + side + 8, dpr,
    labelEvery: Math.ceil(12 / cell) };
}

/**
 * @param {View} view
 * @param {Layout} layout
 */
function renderBase(view, layout) {
  const { left, top, side, width, height, dpr } = layout;
  const canvas = blankCanvas(width, height, dpr);
  const ctx = context2d(canvas);
  const m = view.tokens.length;
  const image = document.createElement("canvas");
  image.width = Math.max(m, 1);
  image.height = Math.max(m, 1);
  context2d(image).putImageData(matrixImage(view.values, m, view.max, (r, c) => outsideWindow(view, r, c)), 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(image, left, top, side, side);
  ctx.font = FONT;
  drawAxisLabels(ctx, view.tokens, layout);
  drawColourBar(ctx, left + side + 12, top, Math.max(side, 60), view.max);
  return canvas;
}

/**
 * @param {CanvasRenderingContext2D} ctx
 * @param {Token[]} tokens
 * @param {Layout} layout
 */
function drawAxisLabels(ctx, tokens, layout) {
  const { left, top, cell, labelEvery } = layout;
  ctx.fillStyle = "#1a1a1a";
  ctx.textBaseline = "middle";
  tokens.forEach((token, i) => {
    if (i % labelEvery !== 0) return;
    const at = (i + 0.5) * cell;
    ctx.textAlign = "right";
    ctx.fillText(tokenLabel(token), left - 4, top + at);
    ctx.save();
    ctx.translate(left + at, top - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    ctx.fillText(tokenLabel(token), 0, 0);
    ctx.restore();
  });
}

/**
 * @param {CanvasRenderingContext2D} ctx
 * @param {Layout} layout
 * @param {Cell} selected
 * @param {number} m tokens shown
 */
function drawSelection(ctx, layout, selected, m) {
  if (m === 0) return;
  const { left, top, cell, side } = layout;
  ctx.strokeStyle = "rgba(255, 255, 255, 0.55)";
  ctx.lineWidth = 1;
  ctx.strokeRect(left, top + selected.row * cell + 0.5, side, cell - 1);
  ctx.strokeRect(left + selected.col * cell + 0.5, top, cell - 1, side);
  ctx.strokeStyle = "#e07b00";
  ctx.lineWidth = 2;
  ctx.strokeRect(left + selected.col * cell - 1, top + selected.row * cell - 1, cell + 2, cell + 2);
  markAxis(ctx, layout, selected);
}

/**
 * @param {CanvasRenderingContext2D} ctx
 * @param {Layout} layout
 * @param {Cell} selected
 */
function markAxis(ctx, layout, selected) {
  const { left, top, cell } = layout;
  ctx.fillStyle = "#e07b00";
  ctx.fillRect(left - 3, top + selected.row * cell, 3, cell);
  ctx.fillRect(left + selected.col * cell, top - 3, cell, 3);
}
