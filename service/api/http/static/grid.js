// attnserve attention explorer: the model view, every layer × head map of an encoder as a
// thumbnail (one small canvas per head, one row per layer, one pixel per weight painted with
// putImageData), each opening its full map. render.js is loaded first.
"use strict";

// A thumbnail's side on the page, whatever the number of tokens: 72 px, smaller for many heads
// so that a row of 12 fits a panel (40 px each).
function thumbPx(heads) { return Math.max(32, Math.min(72, Math.floor(480 / heads))); }
let VIRIDIS_LUT = null;  // 256 × RGB, built on first use

function viridisLut() {
  if (VIRIDIS_LUT) return VIRIDIS_LUT;
  VIRIDIS_LUT = new Uint8ClampedArray(256 * 3);
  for (let i = 0; i < 256; i++) {
    const [r, g, b] = colour(i / 255).slice(4, -1).split(",").map(Number);
    VIRIDIS_LUT.set([r, g, b], 3 * i);
  }
  return VIRIDIS_LUT;
}

// One map as RGBA pixels, one per weight, on the shared scale.
function mapPixels(matrix, scale) {
  const n = matrix.length, lut = viridisLut();
  const pixels = new Uint8ClampedArray(4 * n * n);
  let p = 0;
  for (let i = 0; i < n; i++) {
    const row = matrix[i];
    for (let j = 0; j < n; j++) {
      const t = row[j] / scale;
      const k = 3 * (t >= 1 ? 255 : t > 0 ? Math.round(255 * t) : 0);
      pixels[p] = lut[k]; pixels[p + 1] = lut[k + 1]; pixels[p + 2] = lut[k + 2]; pixels[p + 3] = 255;
      p += 4;
    }
  }
  return pixels;
}

// maps: [{layer, head, matrix}] (0-based), in layer-major order; open(layer, head) on a click,
// Enter or Space. Returns the grid's element.
function thumbnails(side, maps, layers, heads, scale, open) {
  const grid = el("div", { className: "grid", id: `grid-${side}`, role: "group",
    "aria-label": `${layers} layers × ${heads} heads; each thumbnail opens its map`,
    style: { gridTemplateColumns: `max-content repeat(${heads}, ${thumbPx(heads)}px)` } });
  grid.append(el("span", { className: "axis", textContent: "layer ↓ head →" }));
  for (let h = 0; h < heads; h++) grid.append(el("span", { className: "axis", textContent: String(h + 1) }));
  const byLayer = new Map();
  for (const map of maps) {
    if (!byLayer.has(map.layer)) byLayer.set(map.layer, []);
    byLayer.get(map.layer).push(map);
  }
  for (let l = 0; l < layers; l++) {
    grid.append(el("span", { className: "axis", textContent: String(l + 1) }));
    for (const map of byLayer.get(l) || []) {
      const n = map.matrix.length;
      const caption = `layer ${l + 1} · head ${map.head + 1}`;
      const canvas = el("canvas", { className: "thumb", id: `thumb-${side}-l${l}-h${map.head}`, width: n, height: n,
        tabIndex: 0, role: "button", title: `${caption}: open its map`, "aria-label": `${caption}: open its map`,
        dataset: { layer: String(l + 1), head: String(map.head + 1) },
        style: { width: `${thumbPx(heads)}px`, height: `${thumbPx(heads)}px` } });
      if (n) canvas.getContext("2d").putImageData(new ImageData(mapPixels(map.matrix, scale), n, n), 0, 0);
      canvas.addEventListener("click", () => open(l + 1, map.head + 1));
      canvas.addEventListener("keydown", (event) => {
        if (event.key !== "Enter" && event.key !== " ") return;
        event.preventDefault();
        open(l + 1, map.head + 1);
      });
      canvas.addEventListener("mouseenter", () => readout(`${caption}: click to open its map`));
      canvas.addEventListener("focus", () => readout(`${caption}: Enter opens its map`));
      grid.append(canvas);
    }
  }
  return grid;
}
