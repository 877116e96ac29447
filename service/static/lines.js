// Lines for one map (the "head view"): the tokens twice, queries on the left and keys on the right, a line
// from each query to each key it attends to, its opacity the attention (relative to the map's maximum).
// At rest each query shows its 8 strongest lines; pointing at a token, or moving with the arrow keys
// (Left/Right change side), shows all of that token's lines over the others, faded.
// Lines are stroked one by one (one path of many crossing lines is far slower to stroke), in 24 opacities.

import { blankCanvas, viewCanvas } from "./canvas.js";
import { formatValue } from "./colormap.js";
import { tokenLabel } from "./matrix.js";

const FONT = "12px system-ui, 'DejaVu Sans', sans-serif";
const ROW = 16;
const TOP = 8;
const SPAN = 170; // horizontal distance the lines cross
const BUCKETS = 24;
const TOP_K = 8; // lines drawn per query at rest: its strongest ones (software canvases stroke ~10 lines/ms)
const LINE = "31, 78, 140"; // the accent blue
const FOCUS = "224, 123, 0"; // the focus orange

export class Lines {
  constructor(figure, readout) {
    this.canvas = viewCanvas(figure);
    this.readout = readout;
    this.focus = null; // {side: "query" | "key", index}
    this.canvas.addEventListener("mousemove", (e) => this.pointAt(e.offsetX, e.offsetY));
    this.canvas.addEventListener("keydown", (e) => this.onKey(e));
  }

  show(view, title) {
    this.view = view;
    this.title = title;
    this.layout = layoutFor(view.tokens);
    this.plain = renderBase(view, this.layout);
    this.faded = fadedCopy(this.plain, view, this.layout);
    const { width, height } = this.layout;
    Object.assign(this.canvas.dataset, { left: this.layout.column, right: this.layout.column + SPAN, top: TOP, row: ROW });
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    this.canvas.width = this.plain.width;
    this.canvas.height = this.plain.height;
    this.canvas.setAttribute("aria-label", `Attention lines, ${title}, ${view.tokens.length} tokens. `
      + "Up and Down choose a token, Left and Right the side.");
    if (this.focus && this.focus.index >= view.tokens.length) this.focus = null;
    this.redraw();
  }

  pointAt(x, y) {
    const index = Math.floor((y - TOP) / ROW);
    if (!this.view || index < 0 || index >= this.view.tokens.length) return;
    this.setFocus({ side: x < this.layout.column + SPAN / 2 ? "query" : "key", index });
  }

  onKey(event) {
    if (!this.view || this.view.tokens.length === 0) return;
    const focus = this.focus || { side: "query", index: 0 };
    const last = this.view.tokens.length - 1;
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

  setFocus(focus) {
    this.focus = focus;
    this.redraw();
  }

  redraw() {
    const ctx = this.canvas.getContext("2d");
    const { dpr } = this.layout;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.drawImage(this.focus ? this.faded : this.plain, 0, 0);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    if (this.focus) drawFocus(ctx, this.view, this.layout, this.focus);
    this.updateReadout();
  }

  updateReadout() {
    if (this.view.tokens.length === 0) {
      this.readout.textContent = `${this.title}: no tokens left to show (all are special tokens)`;
      return;
    }
    if (!this.focus) {
      this.readout.textContent = `${this.title}: point at a token, or use the arrow keys, to see its lines`;
      delete this.readout.dataset.token;
      return;
    }
    const { side, index } = this.focus;
    const ranked = partners(this.view, this.focus).slice(0, 3);
    const { tokens, indices } = this.view;
    const verb = side === "query" ? "attends most to" : "is attended most by";
    const list = ranked.map(([j, v]) => `“${tokens[j].text}” ${formatValue(v)}`).join(", ");
    this.readout.textContent = `${this.title} · ${side} ${indices[index]} “${tokens[index].text}” ${verb} ${list}`;
    Object.assign(this.readout.dataset, { side, token: indices[index], partner: indices[ranked[0][0]],
      value: String(ranked[0][1]) });
  }
}

// [other index, attention] for every partner of the focused token, largest first.
function partners(view, { side, index }) {
  const m = view.tokens.length;
  const pairs = [];
  for (let j = 0; j < m; j++) pairs.push([j, side === "query" ? view.values[index * m + j] : view.values[j * m + index]]);
  return pairs.sort((a, b) => b[1] - a[1]);
}

function layoutFor(tokens) {
  const probe = document.createElement("canvas").getContext("2d");
  probe.font = FONT;
  const widest = Math.max(...tokens.map((t) => probe.measureText(tokenLabel(t)).width), 20);
  const column = Math.ceil(Math.min(widest, 140)) + 12;
  const dpr = window.devicePixelRatio || 1;
  return { column, width: 2 * column + SPAN, height: 2 * TOP + tokens.length * ROW, dpr };
}

const rowY = (i) => TOP + (i + 0.5) * ROW;

function renderBase(view, layout) {
  const { width, height, dpr, column } = layout;
  const canvas = blankCanvas(width, height, dpr);
  const ctx = canvas.getContext("2d");
  drawTokens(ctx, view.tokens, column);
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

// The same drawing with the lines faded (the backdrop while one token's lines are shown); tokens stay dark.
function fadedCopy(plain, view, layout) {
  const { width, height, dpr, column } = layout;
  const canvas = blankCanvas(width, height, dpr);
  const ctx = canvas.getContext("2d");
  ctx.globalAlpha = 0.15;
  ctx.setTransform(1, 0, 0, 1, 0, 0);
  ctx.drawImage(plain, 0, 0);
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.globalAlpha = 1;
  drawTokens(ctx, view.tokens, column);
  return canvas;
}

// Indices of the k largest values of a row (all of them when the row is short).
function strongest(row, k) {
  const order = Array.from(row.keys());
  if (row.length <= k) return order;
  return order.sort((a, b) => row[b] - row[a]).slice(0, k);
}

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

function drawFocus(ctx, view, layout, focus) {
  const { column } = layout;
  const m = view.tokens.length;
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
