// Canvas pieces the three views share: the focusable canvas each view draws on, and a white off-screen
// canvas sized for the device's pixel ratio (drawn in CSS pixels: its context is already scaled).

export function viewCanvas(figure) {
  const canvas = document.createElement("canvas");
  canvas.tabIndex = 0;
  canvas.setAttribute("role", "img");
  figure.append(canvas);
  return canvas;
}

export function blankCanvas(width, height, dpr) {
  const canvas = document.createElement("canvas");
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  const ctx = canvas.getContext("2d");
  ctx.scale(dpr, dpr);
  ctx.fillStyle = "#ffffff";
  ctx.fillRect(0, 0, width, height);
  return canvas;
}
