// @ts-check
// Decoding /attention's `encoding: "base64"`, `dtype: "float16"` answers: base64 -> bytes ->
// little-endian IEEE 754 half floats -> Float32Array. Float16Array is used where the browser has it;
// elsewhere a 65,536-entry table built from halfToFloat does the same work.

/** @param {number} bits an IEEE 754 half float's 16 bits */
export function halfToFloat(bits) {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * fraction * 2 ** -24; // zero and subnormals
  if (exponent === 31) return fraction ? NaN : sign * Infinity;
  return sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
}

/** @type {Float32Array | null} */
let table = null;

function halfTable() {
  if (table === null) {
    table = new Float32Array(65536);
    for (let bits = 0; bits < 65536; bits++) table[bits] = halfToFloat(bits);
  }
  return table;
}

/** @param {string} text */
export function base64Bytes(text) {
  if (typeof Uint8Array.fromBase64 === "function") return Uint8Array.fromBase64(text);
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

const littleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/**
 * Little-endian half floats as float32; `native`: use Float16Array when there is one (tests pass false to check
 * the table path too).
 * @param {Uint8Array} bytes
 * @param {boolean} [native]
 */
export function halvesToFloats(bytes, native = true) {
  const count = bytes.byteLength >> 1;
  if (native && littleEndian && typeof Float16Array === "function") {
    return new Float32Array(new Float16Array(bytes.buffer, bytes.byteOffset, count));
  }
  const lookup = halfTable();
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = lookup[view.getUint16(2 * i, true)];
  return out;
}

/**
 * @param {string} text base64 of little-endian half floats
 * @param {boolean} [native]
 */
export function decodeFloat16(text, native = true) {
  return halvesToFloats(base64Bytes(text), native);
}
