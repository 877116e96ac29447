// @ts-check
// All heads at once (the "model view"): a layers x heads grid of thumbnails, each map on its own colour
// scale (0 .. its maximum; grey beyond a local layer's window, its layer labelled with the window, and after the
// query in a causal model's maps). Clicking a thumbnail, or Enter on the one chosen with the arrow keys, opens it
// in the heatmap. One canvas for the whole grid.

import { blankCanvas, context2d, viewCanvas } from "./canvas.js";
import { matrixImage } from "./colormap.js";
import { outsideWindow, reach, viewOf } from "./matrix.js";

/** @typedef {import("./matrix.js").Item} Item */
/** @typedef {import("./matrix.js").View} View */
/** @typedef {import("./matrix.js").ViewOptions} ViewOptions */

/**
 * The grid on the canvas, in CSS pixels: thumbnails `thumb` wide, GAP apart, after LABEL for the labels.
 * @typedef {{layers: number, heads: number, thumb: number, width: number, height: number, dpr: number}} Layout
 */

/** @typedef {{layer: number, head: number}} Head */

/** @typedef {{layout: Layout, base: HTMLCanvasElement}} Drawn */

const FONT = "12px system-ui, 'DejaVu Sans', sans-serif";
const LABEL = 34; // room for the layer and head labels
const GAP = 4;

export class Grid {
  /**
   * @param {HTMLElement} figure
   * @param {HTMLElement} readout
   * @param {(layer: number, head: number) => void} onPick called with the head to open in the heatmap
   */
  constructor(figure, readout, onPick) {
    this.canvas = viewCanvas(figure);
    this.readout = readout;
    this.onPick = onPick;
    /** @type {Head} */
    this.selected = { layer: 0, head: 0 };
    /** @type {Drawn | null} */
    this.drawn = null;
    this.canvas.addEventListener("mousemove", (e) => this.pointAt(e.offsetX, e.offsetY, false));
    this.canvas.addEventListener("click", (e) => this.pointAt(e.offsetX, e.offsetY, true));
    this.canvas.addEventListener("keydown", (e) => this.onKey(e));
  }

  /**
   * @param {Item} item an /attention item of shape (layers, heads, n, n)
   * @param {ViewOptions} options
   * @param {number} width CSS pixels available
   * @param {Head} selected the head chosen in the other views
   * @param {(number | null)[]} windows per layer, a local layer's reach on each side (null: global)
   * @param {boolean} [causal] a causal model's maps: later keys masked, windows one-sided
   */
  show(item, options, width, selected, windows, causal = false) {
    const [layers, heads] = item.shape;
    const thumb = Math.max(36, Math.min(120, Math.floor((width - LABEL) / heads) - GAP));
    const layout = { layers, heads, thumb, dpr: window.devicePixelRatio || 1,
      width: LABEL + heads * (thumb + GAP), height: LABEL + layers * (thumb + GAP) };
    const base = renderGrid(item, options, layout, windows, causal);
    this.drawn = { layout, base };
    this.selected = { layer: Math.min(selected.layer, layers - 1), head: Math.min(selected.head, heads - 1) };
    Object.assign(this.canvas.dataset, { left: LABEL, top: LABEL, thumb, gap: GAP, layers, heads });
    this.canvas.style.width = `${layout.width}px`;
    this.canvas.style.height = `${layout.height}px`;
    this.canvas.width = base.width;
    this.canvas.height = base.height;
    this.canvas.setAttribute("aria-label", `All heads: ${layers} layers by ${heads} heads. ${maskNote(windows, causal)}`
      + "The arrow keys choose one, Enter opens it in the heatmap.");
    this.redraw();
  }

  /**
   * @param {number} x
   * @param {number} y
   * @param {boolean} pick whether to open the head pointed at (a click) or only select it
   */
  pointAt(x, y, pick) {
    if (!this.drawn) return;
    const { layers, heads, thumb } = this.drawn.layout;
    const layer = Math.floor((y - LABEL) / (thumb + GAP));
    const head = Math.floor((x - LABEL) / (thumb + GAP));
    if (layer < 0 || head < 0 || layer >= layers || head >= heads) return;
    this.select(layer, head);
    if (pick) this.onPick(layer, head);
  }

  /** @param {KeyboardEvent} event */
  onKey(event) {
    if (!this.drawn) return;
    /** @type {Record<string, [number, number]>} */
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    const { layer, head } = this.selected;
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      this.onPick(layer, head);
      return;
    }
    const move = moves[event.key];
    if (!move) return;
    event.preventDefault();
    const { layers, heads } = this.drawn.layout;
    this.select(Math.max(0, Math.min(layers - 1, layer + move[0])), Math.max(0, Math.min(heads - 1, head + move[1])));
  }

  /**
   * @param {number} layer
   * @param {number} head
   */
  select(layer, head) {
    this.selected = { layer, head };
    this.redraw();
  }

  redraw() {
    if (!this.drawn) return;
    const ctx = context2d(this.canvas);
    const { thumb, dpr } = this.drawn.layout;
    const { layer, head } = this.selected;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.drawImage(this.drawn.base, 0, 0);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.strokeStyle = "#e07b00";
    ctx.lineWidth = 3;
    ctx.strokeRect(LABEL + head * (thumb + GAP) - 2, LABEL + layer * (thumb + GAP) - 2, thumb + 4, thumb + 4);
    this.readout.textContent = `layer ${layer} · head ${head}: click or press Enter to open it in the heatmap`;
    Object.assign(this.readout.dataset, { layer, head });
  }
}

/**
 * @param {Item} item
 * @param {ViewOptions} options
 * @param {Layout} layout
 * @param {(number | null)[]} windows
 * @param {boolean} causal
 */
function renderGrid(item, options, layout, windows, causal) {
  const { layers, heads, thumb, width, height, dpr } = layout;
  const canvas = blankCanvas(width, height, dpr);
  const ctx = context2d(canvas);
  drawLabels(ctx, layout, windows, causal);
  const scratch = document.createElement("canvas");
  ctx.imageSmoothingQuality = "high";
  for (let layer = 0; layer < layers; layer++) {
    for (let head = 0; head < heads; head++) {
      const view = viewOf(item, layer * heads + head, options, windows[layer] ?? null, causal);
      drawThumb(ctx, scratch, view, LABEL + head * (thumb + GAP), LABEL + layer * (thumb + GAP), thumb);
    }
  }
  return canvas;
}

/**
 * @param {CanvasRenderingContext2D} ctx
 * @param {HTMLCanvasElement} scratch a canvas to draw the map on at one pixel per cell
 * @param {View} view
 * @param {number} x
 * @param {number} y
 * @param {number} size
 */
function drawThumb(ctx, scratch, view, x, y, size) {
  const m = view.tokens.length;
  scratch.width = Math.max(m, 1);
  scratch.height = Math.max(m, 1);
  context2d(scratch).putImageData(matrixImage(view.values, m, view.max, (r, c) => outsideWindow(view, r, c)), 0, 0);
  ctx.imageSmoothingEnabled = m > size; // average when shrinking, crisp cells when growing
  ctx.drawImage(scratch, x, y, size, size);
}

/**
 * What the grey cells of the thumbnails are, for the grid's label (the canvas's text is not read out).
 * @param {(number | null)[]} windows
 * @param {boolean} causal
 */
function maskNote(windows, causal) {
  const later = causal ? "Keys after their query are grey: a causal model's token does not see later tokens. " : "";
  const local = windows.flatMap((w, layer) => (w === null ? [] : [`${layer} (local ${reach(w, causal)})`]));
  const band = local.length ? `In layers ${local.join(", ")} keys beyond the window are grey. ` : "";
  return later + band;
}

/**
 * Head numbers above, layer numbers beside; a local layer's window under its number (±w; −w back only, causal).
 * @param {CanvasRenderingContext2D} ctx
 * @param {Layout} layout
 * @param {(number | null)[]} windows
 * @param {boolean} causal
 */
function drawLabels(ctx, { layers, heads, thumb }, windows, causal) {
  ctx.font = FONT;
  ctx.fillStyle = "#1a1a1a";
  ctx.textAlign = "center";
  ctx.textBaseline = "middle";
  for (let head = 0; head < heads; head++) ctx.fillText(`H${head}`, LABEL + head * (thumb + GAP) + thumb / 2, LABEL / 2);
  for (let layer = 0; layer < layers; layer++) {
    const middle = LABEL + layer * (thumb + GAP) + thumb / 2;
    const window = windows[layer] ?? null;
    ctx.fillText(`L${layer}`, LABEL / 2, window === null ? middle : middle - 7);
    if (window !== null) ctx.fillText(reach(window, causal), LABEL / 2, middle + 7);
  }
}
