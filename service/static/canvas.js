// @ts-check
// Canvas pieces the three views share: the focusable canvas each view draws on, a white off-screen canvas
// sized for the device's pixel ratio (drawn in CSS pixels: its context is already scaled), and a canvas's
// 2D context (which a browser gives unless it is out of memory or the canvas has another kind of context).

/** @param {HTMLElement} figure */
export function viewCanvas(figure) {
  const canvas = document.createElement("canvas");
  canvas.tabIndex = 0;
  canvas.setAttribute("role", "img");
  figure.append(canvas);
  return canvas;
}

/**
 * @param {number} width CSS pixels
 * @param {number} height CSS pixels
 * @param {number} dpr the device's pixels per CSS pixel
 */
export function blankCanvas(width, height, dpr) {
  const canvas = document.createElement("canvas");
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  const ctx = context2d(canvas);
  ctx.scale(dpr, dpr);
  ctx.fillStyle = "#ffffff";
  ctx.fillRect(0, 0, width, height);
  return canvas;
}

/** @param {HTMLCanvasElement} canvas */
export function context2d(canvas) {
  const ctx = canvas.getContext("2d");
  if (ctx === null) throw new Error("the browser gave no 2D context for a canvas (out of memory?)");
  return ctx;
}
