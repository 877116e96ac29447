// @ts-check
// Lines for one map (the "head view"): the tokens twice, queries on the left and keys on the right, a line
// from each query to each key it attends to, its opacity the attention (relative to the map's maximum).
// At rest each query shows its 8 strongest lines; pointing at a token, or moving with the arrow keys
// (Left/Right change side), shows all of that token's lines over the others, faded.
// Lines are stroked one by one (one path of many crossing lines is far slower to stroke), in 24 opacities.

import { blankCanvas, context2d, viewCanvas } from "./canvas.js";
import { formatValue } from "./colormap.js";
import { tokenLabel } from "./matrix.js";

/** @typedef {import("./matrix.js").Token} Token */
/** @typedef {import("./matrix.js").View} View */

/**
 * The token columns on the canvas, in CSS pixels: each `column` wide, SPAN apart.
 * @typedef {{column: number, width: number, height: number, dpr: number}} Layout
 */

/** @typedef {{side: "query" | "key", index: number}} Focus a token, on one side */

/**
 * What show() drew: the view, its title and layout, the drawing at rest and the one faded behind a focus.
 * @typedef {{view: View, title: string, layout: Layout, plain: HTMLCanvasElement, faded: HTMLCanvasElement}} Drawn
 */

const FONT = "12px system-ui, 'DejaVu Sans', sans-serif";
const ROW = 16;
const TOP = 8;
const SPAN = 170; // horizontal distance the lines cross
const BUCKETS = 24;
const TOP_K = 8; // lines drawn per query at rest: its strongest ones (software canvases stroke ~10 lines/ms)
const LINE = "31, 78, 140"; // the accent blue
const FOCUS = "224, 123, 0"; // the focus orange

export class Lines {
  /**
   * @param {HTMLElement} figure
   * @param {HTMLElement} readout
   */
  constructor(figure, readout) {
    this.canvas = viewCanvas(figure);
    this.readout = readout;
    /** @type {Focus | null} */
    this.focus = null;
    /** @type {Drawn | null} */
    this.drawn = null;
    this.canvas.addEventListener("mousemove", (e) => this.pointAt(e.offsetX, e.offsetY));
    this.canvas.addEventListener("keydown", (e) => this.onKey(e));
  }

  /**
   * @param {View} view see matrix.viewOf
   * @param {string} title names the map
   */
  show(view, title) {
    const layout = layoutFor(view.tokens);
    const plain = renderBase(view, layout);
    this.drawn = { view, title, layout, plain, faded: fadedCopy(plain, view, layout) };
    const { width, height, column } = layout;
    Object.assign(this.canvas.dataset, { left: column, right: column + SPAN, top: TOP, row: ROW });
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    this.canvas.width = plain.width;
    this.canvas.height = plain.height;
    this.canvas.setAttribute("aria-label", `Attention lines, ${title}, ${view.tokens.length} tokens. `
      + "Up and Down choose a token, Left and Right the side.");
    if (this.focus && this.focus.index >= view.tokens.length) this.focus = null;
    this.redraw();
  }

  /**
   * @param {number} x
   * @param {number} y
   */
  pointAt(x, y) {
    const index = Math.floor((y - TOP) / ROW);
    if (!this.drawn || index < 0 || index >= this.drawn.view.tokens.length) return;
    this.setFocus({ side: x < this.drawn.layout.column + SPAN / 2 ? "query" : "key", index });
  }

  /** @param {KeyboardEvent} event */
  onKey(event) {
    if (!this.drawn || this.drawn.view.tokens.length === 0) return;
    /** @type {Focus} */
    const focus = this.focus || { side: "query", index: 0 };
    const last = this.drawn.view.tokens.length - 1;
    /** @type {Record<string, Focus | null>} */
    const next = {
      ArrowUp: { ...focus, index: Math.max(0, focus.index - 1) },
      ArrowDown: { ...focus, index: Math.min(last, focus.index + 1) },
      ArrowLeft: { ...focus, side: "query" },
      ArrowRight: { ...focus, side: "key" },
      Escape: null,
    };
    if (!(event.key in next)) return;
    event.preventDefault();
    this.setFocus(this.focus === null && event.key !== "Escape" ? focus : next[event.key]);
  }

  /** @param {Focus | null} focus */
  setFocus(focus) {
    this.focus = focus;
    this.redraw();
  }

  redraw() {
    if (!this.drawn) return;
    const { view, layout, plain, faded } = this.drawn;
    const ctx = context2d(this.canvas);
    const { dpr } = layout;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.drawImage(this.focus ? faded : plain, 0, 0);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    if (this.focus) drawFocus(ctx, view, layout, this.focus);
    this.updateReadout(this.drawn);
  }

  /** @param {Drawn} drawn */
  updateReadout({ view, title }) {
    if (view.tokens.length === 0) {
      this.readout.textContent = `${title}: no tokens left to show (all are special tokens)`;
      return;
    }
    if (!this.focus) {
      this.readout.textContent = `${title}: point at a token, or use the arrow keys, to see its lines`;
      delete this.readout.dataset.token;
      return;
    }
    const { side, index } = this.focus;
    const ranked = partners(view, this.focus).slice(0, 3);
    const { tokens, indices } = view;
    const verb = side === "query" ? "attends most to" : "is attended most by";
    const list = ranked.map(([j, v]) => `“${tokens[j].text}” ${formatValue(v)}`).join(", ");
    this.readout.textContent = `${title} · ${side} ${indices[index]} “${tokens[index].text}” ${verb} ${list}`;
    Object.assign(this.readout.dataset, { side, token: indices[index], partner: indices[ranked[0][0]],
      value: String(ranked[0][1]) });
  }
}

/**
 * [other index, attention] for every partner of the focused token, largest first.
 * @param {View} view
 * @param {Focus} focus
 */
function partners(view, { side, index }) {
  const m = view.tokens.length;
  /** @type {[number, number][]} */
  const pairs = [];
  for (let j = 0; j < m; j++) pairs.push([j, side === "query" ? view.values[index * m + j] : view.values[j * m + index]]);
  return pairs.sort((a, b) => b[1] - a[1]);
}

/**
 * @param {Token[]} tokens
 * @returns {Layout}
 */
function layoutFor(tokens) {
  const probe = context2d(document.createElement("canvas"));
  probe.font = FONT;
  const widest = Math.max(...tokens.map((t) => probe.measureText(tokenLabel(t)).width), 20);
  const column = Math.ceil(Math.min(widest, 140)) + 12;
  const dpr = window.devicePixelRatio || 1;
  return { column, width: 2 * column + SPAN, height: 2 * TOP + tokens.length * ROW, dpr };
}

/** @param {number} i a token's row */
const rowY = (i) => TOP + (i + 0.5) * ROW;

/**
 * @param {View} view
 * @param {Layout} layout
 */
function renderBase(view, layout) {
  const { width, height, dpr, column } = layout;
  const canvas = blankCanvas(width, height, dpr);
  const ctx = context2d(canvas);
  drawTokens(ctx, view.tokens, column);
  /** @type {number[][]} per opacity, the (query, key) pairs to stroke in it, flat */
  const buckets = Array.from({ length: BUCKETS }, () => []);
  const scale = view.max > 0 ? (BUCKETS - 1) / view.max : 0;
  const m = view.tokens.length;
  for (let i = 0; i < m; i++) {
    for (const j of strongest(view.values.subarray(i * m, (i + 1) * m), TOP_K)) {
      const bucket = Math.round(view.values[i * m + j] * scale);
      if (bucket > 0) buckets[bucket].push(i, j);
    }
  }
  ctx.lineWidth = 1.5;
  buckets.forEach((pairs, bucket) => {
    ctx.strokeStyle = `rgba(${LINE}, ${bucket / (BUCKETS - 1)})`;
    for (let p = 0; p < pairs.length; p += 2) {
      ctx.beginPath();
      ctx.moveTo(column, rowY(pairs[p]));
      ctx.lineTo(column + SPAN, rowY(pairs[p + 1]));
      ctx.stroke();
    }
  });
  return canvas;
}

/**
 * The same drawing with the lines faded (the backdrop while one token's lines are shown); tokens stay dark.
 * @param {HTMLCanvasElement} plain
 * @param {View} view
 * @param {Layout} layout
 */
function fadedCopy(plain, view, layout) {
  const { width, height, dpr, column } = layout;
  const canvas = blankCanvas(width, height, dpr);
  const ctx = context2d(canvas);
  ctx.globalAlpha = 0.15;
  ctx.setTransform(1, 0, 0, 1, 0, 0);
  ctx.drawImage(plain, 0, 0);
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.globalAlpha = 1;
  drawTokens(ctx, view.tokens, column);
  return canvas;
}

/**
 * Indices of the k largest values of a row (all of them when the row is short).
 * @param {Float32Array} row
 * @param {number} k
 */
function strongest(row, k) {
  const order = Array.from(row.keys());
  if (row.length <= k) return order;
  return order.sort((a, b) => row[b] - row[a]).slice(0, k);
}

/**
 * @param {CanvasRenderingContext2D} ctx
 * @param {Token[]} tokens
 * @param {number} column
 */
function drawTokens(ctx, tokens, column) {
  ctx.font = FONT;
  ctx.fillStyle = "#1a1a1a";
  ctx.textBaseline = "middle";
  tokens.forEach((token, i) => {
    ctx.textAlign = "right";
    ctx.fillText(tokenLabel(token), column - 6, rowY(i));
    ctx.textAlign = "left";
    ctx.fillText(tokenLabel(token), column + SPAN + 6, rowY(i));
  });
}

/**
 * @param {CanvasRenderingContext2D} ctx
 * @param {View} view
 * @param {Layout} layout
 * @param {Focus} focus
 */
function drawFocus(ctx, view, layout, focus) {
  const { column } = layout;
  const x = focus.side === "query" ? 0 : column + SPAN;
  ctx.fillStyle = `rgba(${FOCUS}, 0.25)`;
  ctx.fillRect(x, TOP + focus.index * ROW, column, ROW);
  ctx.lineWidth = 2.5;
  for (const [j, value] of partners(view, focus)) {
    const alpha = view.max > 0 ? value / view.max : 0;
    if (alpha < 0.01) break;
    const [from, to] = focus.side === "query" ? [focus.index, j] : [j, focus.index];
    ctx.strokeStyle = `rgba(${FOCUS}, ${alpha})`;
    ctx.beginPath();
    ctx.moveTo(column, rowY(from));
    ctx.lineTo(column + SPAN, rowY(to));
    ctx.stroke();
  }
}
