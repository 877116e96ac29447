// @ts-check
// Export: the canvas a view drew, as PNG, and the exact /attention answer it was drawn from, as JSON.

/**
 * @param {Blob} blob
 * @param {string} name the file's name
 */
function download(blob, name) {
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/**
 * @param {HTMLCanvasElement} canvas
 * @param {string} name
 */
export function downloadCanvas(canvas, name) {
  canvas.toBlob((blob) => { if (blob) download(blob, name); }, "image/png");
}

/**
 * @param {string} text
 * @param {string} name
 */
export function downloadText(text, name) {
  download(new Blob([text], { type: "application/json" }), name);
}
