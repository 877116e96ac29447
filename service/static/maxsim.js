// @ts-check
// The MaxSim view of a multi-vector model (ColBERT, bge-m3): POST /maxsim's answer for a query and a document,
// drawn as a map of query tokens (rows) by document tokens (columns), each cell the two token vectors' cosine on the
// viridis scale from the map's lowest to its highest value; each row's best match (the term it adds to the score) is
// ringed in white; the score and its reduction (the sum or the mean of the row maxima) are written above the map;
// a model whose tokens carry weights (bge-m3's sparse_linear) gets each token's weight as a bar beside its label.
// The pointer or the arrow keys choose a cell; the read-out names both tokens, their weights and the cosine, and
// its data-* attributes carry the same (data-best: the cell is its row's best match), for tests and scripts.

import { call, withModel } from "./api.js";
import { blankCanvas, context2d, viewCanvas } from "./canvas.js";
import { TABLE, drawColourBar, formatValue, level } from "./colormap.js";

/** @typedef {import("./facts.js").Facts} Facts */

/**
 * A token of a /maxsim answer: its vocabulary text, where it is in its text (0, 0 for one the model added), its
 * weight where the model has token weights.
 * @typedef {{token: string, start: number, stop: number, weight?: number | null}} MaxSimToken
 */

/**
 * POST /maxsim's answer (the fields drawn).
 * @typedef {object} MaxSimAnswer
 * @property {MaxSimToken[]} query_tokens Q tokens: the rows
 * @property {MaxSimToken[]} document_tokens K tokens: the columns
 * @property {number[][]} similarities (Q, K) cosines
 * @property {number[]} best per row, the column of its best match
 * @property {number} score
 * @property {"sum" | "mean"} reduction
 */

/** Where things are on the canvas, in CSS pixels. @typedef {{left: number, top: number, cell: number,
 *  rows: number, cols: number, width: number, height: number, dpr: number, weighted: boolean}} Layout */

const FONT = "12px system-ui, 'DejaVu Sans', sans-serif";
const BAR_SPACE = 90; // colour bar and its labels
const MAX_LABEL = 110; // widest axis label, px
const WEIGHT_SPACE = 30; // the weight bars between the labels and the map

/**
 * /maxsim's answer for `query` against `document` on the model and task chosen.
 * @param {string} query
 * @param {string} document
 * @param {Facts} facts
 * @returns {Promise<MaxSimAnswer>}
 */
export async function fetchMaxSim(query, document, facts) {
  const { json } = await call("/maxsim", withModel({ query, document }, facts.model, facts.modelCount, facts.task));
  return /** @type {MaxSimAnswer} */ (json);
}

/**
 * The line above the map: the score and how the row maxima make it.
 * @param {MaxSimAnswer} answer
 */
export function scoreLine(answer) {
  const rows = answer.query_tokens.length;
  const how = answer.reduction === "mean" ? "the mean" : "the sum";
  return `Score ${formatValue(answer.score)}: ${how} of the ${rows} query tokens' best similarities (their row `
    + "maxima, ringed), as the rerank routes give it.";
}

export class MaxSimMap {
  /**
   * @param {HTMLElement} figure
   * @param {HTMLElement} readout
   */
  constructor(figure, readout) {
    this.canvas = viewCanvas(figure);
    this.readout = readout;
    this.selected = { row: 0, col: 0 };
    /** @type {{answer: MaxSimAnswer, layout: Layout, base: HTMLCanvasElement} | null} */
    this.drawn = null;
    this.canvas.addEventListener("mousemove", (e) => this.pointAt(e.offsetX, e.offsetY));
    this.canvas.addEventListener("keydown", (e) => this.onKey(e));
  }

  /**
   * @param {MaxSimAnswer} answer
   * @param {number} width CSS pixels available
   */
  show(answer, width) {
    const layout = layoutFor(answer, width);
    this.drawn = { answer, layout, base: renderBase(answer, layout) };
    const { left, top, cell, rows, cols } = layout;
    Object.assign(this.canvas.dataset, { left, top, cell, rows, cols });
    this.canvas.style.width = `${layout.width}px`;
    this.canvas.style.height = `${layout.height}px`;
    this.canvas.width = this.drawn.base.width;
    this.canvas.height = this.drawn.base.height;
    const weights = layout.weighted ? " Each token's weight is the bar beside its label." : "";
    this.canvas.setAttribute("aria-label", `MaxSim map, ${rows} query tokens by ${cols} document tokens: each cell`
      + ` the two tokens' cosine, each row's best match ringed.${weights} The arrow keys move the read-out.`);
    this.select(0, 0);
  }

  /**
   * @param {number} x
   * @param {number} y
   */
  pointAt(x, y) {
    if (!this.drawn) return;
    const { left, top, cell, rows, cols } = this.drawn.layout;
    const row = Math.floor((y - top) / cell);
    const col = Math.floor((x - left) / cell);
    if (row >= 0 && col >= 0 && row < rows && col < cols) this.select(row, col);
  }

  /** @param {KeyboardEvent} event */
  onKey(event) {
    /** @type {Record<string, [number, number]>} */
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1],
      Home: [0, -Infinity], End: [0, Infinity] };
    const move = moves[event.key];
    if (!move || !this.drawn || this.drawn.layout.rows === 0 || this.drawn.layout.cols === 0) return;
    event.preventDefault();
    const { rows, cols } = this.drawn.layout;
    const row = Math.max(0, Math.min(rows - 1, this.selected.row + move[0]));
    this.select(row, Math.max(0, Math.min(cols - 1, this.selected.col + move[1])));
  }

  /**
   * @param {number} row
   * @param {number} col
   */
  select(row, col) {
    if (!this.drawn) return;
    this.selected = { row, col };
    const { layout, base } = this.drawn;
    const ctx = context2d(this.canvas);
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.drawImage(base, 0, 0);
    ctx.setTransform(layout.dpr, 0, 0, layout.dpr, 0, 0);
    if (layout.rows > 0 && layout.cols > 0) {
      ctx.strokeStyle = "#e07b00";
      ctx.lineWidth = 2;
      ctx.strokeRect(layout.left + col * layout.cell - 1, layout.top + row * layout.cell - 1, layout.cell + 2,
        layout.cell + 2);
    }
    this.updateReadout(this.drawn.answer);
  }

  /** @param {MaxSimAnswer} answer */
  updateReadout(answer) {
    const { row, col } = this.selected;
    if (answer.query_tokens.length === 0 || answer.document_tokens.length === 0) {
      this.readout.textContent = "No token pairs: the query or the document kept no token vectors.";
      return;
    }
    const value = answer.similarities[row][col];
    const best = answer.best[row] === col;
    const query = answer.query_tokens[row];
    const key = answer.document_tokens[col];
    this.readout.textContent = `query ${row} “${query.token}”${weightNote(query)} → document ${col} `
      + `“${key.token}”${weightNote(key)} = ${formatValue(value)}${best ? " · its best match" : ""}`;
    Object.assign(this.readout.dataset, { query: row, key: col, value: String(value), best: String(best),
      queryWeight: String(query.weight ?? ""), keyWeight: String(key.weight ?? "") });
  }
}

/** @param {MaxSimToken} token */
function weightNote(token) {
  return token.weight === null || token.weight === undefined ? "" : ` (weight ${formatValue(token.weight)})`;
}

/** @param {MaxSimToken} token */
function label(token) {
  const text = token.token.length > 14 ? `${token.token.slice(0, 13)}…` : token.token;
  return text.trim() === "" ? JSON.stringify(text) : text;
}

/**
 * @param {MaxSimAnswer} answer
 * @param {number} width
 * @returns {Layout}
 */
function layoutFor(answer, width) {
  const probe = context2d(document.createElement("canvas"));
  probe.font = FONT;
  const widest = (/** @type {MaxSimToken[]} */ tokens) => Math.ceil(Math.min(MAX_LABEL,
    Math.max(20, ...tokens.map((t) => probe.measureText(label(t)).width)))) + 8;
  const weighted = [...answer.query_tokens, ...answer.document_tokens].some((t) => typeof t.weight === "number");
  const extra = weighted ? WEIGHT_SPACE : 0;
  const left = widest(answer.query_tokens) + extra;
  const top = widest(answer.document_tokens) + extra;
  const rows = answer.query_tokens.length;
  const cols = answer.document_tokens.length;
  const cell = Math.max(4, Math.min(28, Math.floor((width - left - BAR_SPACE) / Math.max(cols, 1))));
  return { left, top, cell, rows, cols, width: left + cols * cell + BAR_SPACE, height: top + Math.max(rows * cell, 60) + 8,
    dpr: window.devicePixelRatio || 1, weighted };
}

/**
 * The map without the selection: cells, rings on the row maxima, labels, weight bars, colour bar.
 * @param {MaxSimAnswer} answer
 * @param {Layout} layout
 */
function renderBase(answer, layout) {
  const { left, top, cell, rows, cols } = layout;
  const canvas = blankCanvas(layout.width, layout.height, layout.dpr);
  const ctx = context2d(canvas);
  const flat = answer.similarities.flat();
  const low = Math.min(0, ...flat);
  const high = Math.max(low + 1e-6, ...flat);
  const image = document.createElement("canvas");
  image.width = Math.max(cols, 1);
  image.height = Math.max(rows, 1);
  if (rows > 0 && cols > 0) context2d(image).putImageData(cellsImage(answer.similarities, low, high), 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(image, left, top, cols * cell, rows * cell);
  ringBest(ctx, answer.best, layout);
  ctx.font = FONT;
  drawLabels(ctx, answer, layout);
  drawColourBar(ctx, left + cols * cell + 12, top, Math.max(rows * cell, 60), high, 14, low);
  return canvas;
}

/**
 * A (Q, K) map as a K x Q ImageData coloured on [low, high].
 * @param {number[][]} values
 * @param {number} low
 * @param {number} high
 */
function cellsImage(values, low, high) {
  const image = new ImageData(values[0].length, values.length);
  values.flat().forEach((value, i) => {
    const t = 3 * level(value - low, high - low);
    image.data.set([TABLE[t], TABLE[t + 1], TABLE[t + 2], 255], 4 * i);
  });
  return image;
}

/**
 * @param {CanvasRenderingContext2D} ctx
 * @param {number[]} best
 * @param {Layout} layout
 */
function ringBest(ctx, best, layout) {
  const { left, top, cell } = layout;
  ctx.lineWidth = Math.min(2, cell / 4);
  best.forEach((col, row) => {
    ctx.strokeStyle = "#ffffff";
    ctx.strokeRect(left + col * cell + 1.5, top + row * cell + 1.5, cell - 3, cell - 3);
  });
}

/**
 * Token labels on both axes and, where tokens carry weights, a bar for each (its length: the weight over the
 * largest on the map) between the label and the map.
 * @param {CanvasRenderingContext2D} ctx
 * @param {MaxSimAnswer} answer
 * @param {Layout} layout
 */
function drawLabels(ctx, answer, layout) {
  const { left, top, cell, weighted } = layout;
  const extra = weighted ? WEIGHT_SPACE : 0;
  const every = Math.ceil(12 / cell);
  const weights = [...answer.query_tokens, ...answer.document_tokens].map((t) => t.weight ?? 0);
  const most = Math.max(1e-6, ...weights);
  ctx.textBaseline = "middle";
  answer.query_tokens.forEach((token, i) => {
    const at = top + (i + 0.5) * cell;
    ctx.fillStyle = "#1a1a1a";
    ctx.textAlign = "right";
    if (i % every === 0) ctx.fillText(label(token), left - 4 - extra, at);
    ctx.fillStyle = "#1f4e8c";
    const length = ((token.weight ?? 0) / most) * (extra - 6);
    if (weighted) ctx.fillRect(left - 3 - length, at - cell / 4, length, cell / 2);
  });
  answer.document_tokens.forEach((token, i) => {
    const at = left + (i + 0.5) * cell;
    ctx.fillStyle = "#1f4e8c";
    const length = ((token.weight ?? 0) / most) * (extra - 6);
    if (weighted) ctx.fillRect(at - cell / 4, top - 3 - length, cell / 2, length);
    if (i % every !== 0) return;
    ctx.save();
    ctx.translate(at, top - 4 - extra);
    ctx.rotate(-Math.PI / 2);
    ctx.fillStyle = "#1a1a1a";
    ctx.textAlign = "left";
    ctx.fillText(label(token), 0, 0);
    ctx.restore();
  });
}
