// @ts-check
// The colour scale: viridis (matplotlib's perceptually uniform map, readable with the common colour
// vision deficiencies and in greyscale), as ten evenly spaced stops interpolated into a 256-entry table; and
// the light grey of cells a query cannot attend (outside its local layer's window, or after it in a causal model's
// map), which no value on the scale has.

const STOPS = [
  [68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
  [31, 158, 137], [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37],
];

function buildTable() {
  const table = new Uint8ClampedArray(256 * 3);
  for (let i = 0; i < 256; i++) {
    const at = (i / 255) * (STOPS.length - 1);
    const low = Math.min(Math.floor(at), STOPS.length - 2);
    const t = at - low;
    for (let c = 0; c < 3; c++) table[3 * i + c] = STOPS[low][c] * (1 - t) + STOPS[low + 1][c] * t;
  }
  return table;
}

export const TABLE = buildTable();
export const OUTSIDE = [216, 216, 216]; // a masked key (beyond a window, or later under a causal mask), not a low value

/**
 * Index into TABLE of a value on the scale [0, max].
 * @param {number} value
 * @param {number} max
 */
export function level(value, max) {
  if (!(max > 0)) return 0;
  return Math.max(0, Math.min(255, Math.round((value / max) * 255)));
}

/**
 * @param {number} value
 * @param {number} max
 */
export function cssColour(value, max) {
  const i = 3 * level(value, max);
  return `rgb(${TABLE[i]}, ${TABLE[i + 1]}, ${TABLE[i + 2]})`;
}

/**
 * An n x n matrix (row-major) as an n x n ImageData, coloured on [0, max]; cells `outside` says are masked (beyond
 * a local layer's window, or after their query in a causal model's map) are grey.
 * @param {Float32Array} values
 * @param {number} n
 * @param {number} max
 * @param {(row: number, col: number) => boolean} [outside]
 */
export function matrixImage(values, n, max, outside = () => false) {
  const image = new ImageData(Math.max(n, 1), Math.max(n, 1));
  const pixels = image.data;
  for (let i = 0; i < n * n; i++) {
    const t = 3 * level(values[i], max);
    const rgb = outside(Math.floor(i / n), i % n) ? OUTSIDE : [TABLE[t], TABLE[t + 1], TABLE[t + 2]];
    pixels.set(rgb, 4 * i);
    pixels[4 * i + 3] = 255;
  }
  return image;
}

/** @param {number} value */
export function formatValue(value) {
  return value.toFixed(4);
}

/**
 * A vertical colour bar at (x, y), `height` tall, labelled low .. max (low 0: attention's scale), drawn into a 2D
 * context.
 * @param {CanvasRenderingContext2D} ctx
 * @param {number} x
 * @param {number} y
 * @param {number} height
 * @param {number} max
 * @param {number} [width]
 * @param {number} [low] the scale's bottom (MaxSim's cosines go below 0)
 */
export function drawColourBar(ctx, x, y, height, max, width = 14, low = 0) {
  const span = max - low;
  for (let py = 0; py < height; py++) {
    ctx.fillStyle = cssColour((1 - py / Math.max(height - 1, 1)) * span, span);
    ctx.fillRect(x, y + py, width, 1);
  }
  ctx.strokeStyle = "#4a4a4a";
  ctx.strokeRect(x + 0.5, y + 0.5, width - 1, height - 1);
  ctx.fillStyle = "#1a1a1a";
  ctx.textBaseline = "middle";
  ctx.textAlign = "left";
  for (const fraction of [1, 0.5, 0]) {
    ctx.fillText(formatValue(low + fraction * span), x + width + 4, y + (1 - fraction) * (height - 1));
  }
}
