// attnserve attention explorer: take an explanation along. The PNG is the panel as drawn
// (label, tokens by attention and by attribution, the visible maps or the model view's
// thumbnails, same colours), painted on a canvas; the CSV is one row per token (attention and
// attribution); the JSON is the service's reply byte for byte. No library: canvas, Blob and a
// download link.
"use strict";

const CELL = 18;
const GAP = 24;
const FONT = "12px ui-monospace, monospace";
const TITLE_FONT = "bold 14px system-ui, sans-serif";
const MAPS_PER_ROW = 4;
const THUMB = 96;  // a thumbnail's side in the picture

function csvField(value) {
  const text = String(value);
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

// One row per token (or word, when merged): what the two coloured rows show.
function saveCsv(view, filename) {
  const lines = [["index", "token", "special", "attention", "attribution"].join(",")];
  view.labels.forEach((label, i) => {
    lines.push([i, csvField(label), view.special[i] ? 1 : 0, view.weights.length ? view.weights[i] : "",
      view.attribution ? view.attribution[i] : ""].join(","));
  });
  saveBlob(new Blob([lines.join("\r\n") + "\r\n"], { type: "text/csv" }), filename);
}

function saveBlob(blob, filename) {
  const url = URL.createObjectURL(blob);
  const link = el("a", { href: url, download: filename, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

function saveJson(text, filename) {
  saveBlob(new Blob([text], { type: "application/json" }), filename);
}

// Lay out and paint one panel; returns the canvas (its size is the PNG's size).
// extra: {high (the attribution scale), method}.
function paint(title, label, view, scale, extra) {
  const probe = document.createElement("canvas").getContext("2d");
  probe.font = FONT;
  const labelWidth = Math.ceil(Math.max(40, ...view.labels.map((w) => probe.measureText(w).width))) + 8;
  const n = view.labels.length;
  const mapWidth = labelWidth + n * CELL;
  const mapHeight = 18 + labelWidth + n * CELL;
  const full = view.maps.filter((m) => !m.thumb), thumbs = view.maps.filter((m) => m.thumb);
  const columns = Math.max(1, Math.min(MAPS_PER_ROW, full.length));
  const rows = Math.ceil(full.length / MAPS_PER_ROW);
  const layers = thumbs.length ? Math.max(...thumbs.map((m) => m.layer)) + 1 : 0;
  const heads = thumbs.length ? Math.max(...thumbs.map((m) => m.head)) + 1 : 0;
  const thumbBlock = thumbs.length ? 34 + layers * (THUMB + 6) + GAP : 0;
  const strip = view.weights.length ? 18 + labelWidth + CELL + GAP : 0;
  const attributed = view.attribution && extra && extra.method !== "none";
  const attributionStrip = attributed ? 18 + (strip ? 0 : labelWidth) + CELL + GAP : 0;
  const width = Math.max(480, GAP + columns * (mapWidth + GAP), GAP + labelWidth + n * CELL + GAP,
    GAP + 40 + heads * (THUMB + 6) + GAP);
  const height = GAP + 48 + strip + attributionStrip + thumbBlock + rows * (mapHeight + GAP);
  const canvas = el("canvas", { width, height });
  const g = canvas.getContext("2d");
  g.fillStyle = "#fff";
  g.fillRect(0, 0, width, height);
  g.fillStyle = "#111";
  g.font = TITLE_FONT;
  g.textBaseline = "top";
  g.fillText(title, GAP, GAP);
  g.fillText(`label: ${label}`, GAP, GAP + 20);
  if (view.maps.some((m) => !m.rollout)) {  // the colour scale the layer × head maps share
    const left = Math.max(GAP + 300, width - GAP - 240), y = GAP + 22;
    g.font = FONT;
    g.fillText("0", left - 14, y);
    for (let x = 0; x < 160; x++) { g.fillStyle = colour(x / 159); g.fillRect(left + x, y, 1, 12); }
    g.fillStyle = "#111";
    g.fillText(fmt(scale), left + 166, y);
  }
  let top = GAP + 48;
  const columnLabels = (left, y) => {  // written upwards, ending at the top of the grid
    view.labels.forEach((word, j) => {
      g.save();
      g.translate(left + j * CELL + CELL / 2 + 4, y + labelWidth - 4);
      g.rotate(-Math.PI / 2);
      g.fillStyle = view.special[j] ? "#b2182b" : "#333";
      g.fillText(word, 0, 0);
      g.restore();
    });
  };
  g.font = FONT;
  g.textBaseline = "alphabetic";
  if (view.weights.length) {
    const high = Math.max(...view.weights, 1e-9);
    g.fillText("pooled attention", GAP, top + 12);
    columnLabels(GAP + labelWidth, top + 18);
    view.weights.forEach((w, j) => {
      g.fillStyle = colour(w / high);
      g.fillRect(GAP + labelWidth + j * CELL, top + 18 + labelWidth, CELL, CELL);
    });
    top += strip;
  }
  if (attributed) {  // the attribution row under the attention row, same columns
    const high = extra.high || 1;
    g.fillStyle = "#111";
    g.fillText(`attribution (${extra.method}): red for '${label.split(" (")[0]}', blue against`, GAP, top + 12);
    if (!strip) columnLabels(GAP + labelWidth, top + 18);
    const y = top + 18 + (strip ? 0 : labelWidth);
    view.attribution.forEach((a, j) => {
      g.fillStyle = diverging(a / high);
      g.fillRect(GAP + labelWidth + j * CELL, y, CELL, CELL);
    });
    top += attributionStrip;
  }
  if (thumbs.length) {  // the model view: one thumbnail per layer × head, one pixel per weight
    g.fillStyle = "#111";
    g.fillText("every layer × head (rows: layers, columns: heads)", GAP, top + 12);
    const tile = document.createElement("canvas");
    for (const map of thumbs) {
      const size = map.matrix.length;
      if (!size) continue;
      tile.width = tile.height = size;
      tile.getContext("2d").putImageData(new ImageData(mapPixels(map.matrix, scale), size, size), 0, 0);
      g.imageSmoothingEnabled = false;
      g.drawImage(tile, GAP + 40 + map.head * (THUMB + 6), top + 34 + map.layer * (THUMB + 6), THUMB, THUMB);
    }
    g.fillStyle = "#333";
    for (let l = 0; l < layers; l++) g.fillText(`L${l + 1}`, GAP, top + 34 + l * (THUMB + 6) + THUMB / 2);
    for (let h = 0; h < heads; h++) g.fillText(`H${h + 1}`, GAP + 40 + h * (THUMB + 6) + THUMB / 2 - 8, top + 30);
    top += thumbBlock;
  }
  full.forEach((map, k) => {
    const left = GAP + (k % MAPS_PER_ROW) * (mapWidth + GAP);
    const y = top + Math.floor(k / MAPS_PER_ROW) * (mapHeight + GAP);
    const own = map.rollout ? maxOf(map.matrix.flat()) || 1 : scale;
    g.fillStyle = "#111";
    g.fillText(map.caption, left, y + 12);
    columnLabels(left + labelWidth, y + 18);
    const gridTop = y + 18 + labelWidth;
    map.matrix.forEach((row, i) => {
      g.fillStyle = view.special[i] ? "#b2182b" : "#333";
      g.fillText(view.labels[i], left, gridTop + i * CELL + CELL - 5);
      row.forEach((value, j) => {
        g.fillStyle = colour(value / own);
        g.fillRect(left + labelWidth + j * CELL, gridTop + i * CELL, CELL, CELL);
      });
    });
  });
  return canvas;
}

function savePng(title, label, view, scale, extra, filename) {
  return new Promise((resolve, reject) => {
    paint(title, label, view, scale, extra).toBlob((blob) => {
      if (!blob) { reject(new Error("the browser could not encode the picture")); return; }
      saveBlob(blob, filename);
      resolve(blob.size);
    }, "image/png");
  });
}
