// attnserve attention explorer: drawing (colours, bars, tokens, heatmaps); no state, no network.
"use strict";

const $ = (id) => document.getElementById(id);

// viridis, 11 stops: ordered in lightness, readable with every common colour-vision deficiency.
const VIRIDIS = ["#440154", "#482475", "#414487", "#355f8d", "#2a788e", "#21918c",
  "#22a884", "#44bf70", "#7ad151", "#bddf26", "#fde725"];
function rgb(hex) { return [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)); }

function colour(t) {
  const x = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const a = rgb(VIRIDIS[i]), b = rgb(VIRIDIS[i + 1]), f = x - i;
  return `rgb(${a.map((v, k) => Math.round(v + (b[k] - v) * f)).join(",")})`;
}

function ink(t) { return t > 0.55 ? "#111" : "#fff"; }  // viridis turns light above ~0.55

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "style") Object.assign(node.style, value);
    else if (key in node) node[key] = value;
    else node.setAttribute(key, value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function fmt(x) { return Number(x).toFixed(4); }

function readout(text) { $("readout").textContent = text; }

// --- attention arithmetic (mirrors the server's definitions) -----------------------------
function meanRows(matrix) {  // [n][n] -> [n]: attention each key receives, averaged over queries
  const n = matrix.length;
  return matrix[0].map((_, j) => matrix.reduce((s, row) => s + row[j], 0) / n);
}

function pooledWeights(result, kind) {
  if (kind === "pool") return result.attention;  // [n]
  const last = result.attention[result.attention.length - 1];  // [H][n][n]
  const n = last[0].length;
  const pooled = Array.from({ length: n }, (_, i) => Array.from({ length: n },
    (_, j) => last.reduce((s, head) => s + head[i][j], 0) / last.length));
  return meanRows(pooled);
}

// --- rendering ---------------------------------------------------------------------------
function bars(labels, probabilities, chosen) {
  const grid = el("div", { className: "bars", role: "list" });
  labels.forEach((label, i) => {
    const p = probabilities[i];
    grid.append(
      el("span", { textContent: label, style: { fontWeight: i === chosen ? "600" : "400" } }),
      el("div", { className: "bar", role: "img", "aria-label": `${label}: ${(100 * p).toFixed(1)}%` },
        el("div", { style: { width: `${(100 * p).toFixed(2)}%` } })),
      el("span", { className: "num", textContent: `${(100 * p).toFixed(1)}%` }));
  });
  return grid;
}

function legend(low, high, caption) {
  const stops = VIRIDIS.map((c, i) => `${c} ${(100 * i / (VIRIDIS.length - 1)).toFixed(0)}%`).join(",");
  return el("div", { className: "legend" }, el("span", { textContent: caption }),
    el("span", { textContent: fmt(low) }),
    el("span", { className: "ramp", role: "img", "aria-label": `colour scale from ${fmt(low)} to ${fmt(high)}`,
      style: { background: `linear-gradient(to right, ${stops})` } }),
    el("span", { textContent: fmt(high) }));
}

function tokens(side, words, weights, special) {
  const high = Math.max(...weights, 1e-9);
  const row = el("div", { className: "tokens", id: `tokens-${side}` });
  words.forEach((word, i) => {
    const t = weights[i] / high;
    const text = `token ${i} '${word}': pooled attention ${fmt(weights[i])}`;
    const span = el("span", { className: special[i] ? "token special" : "token", textContent: word,
      tabIndex: 0, title: special[i] ? `${text} (added by the tokenizer)` : text,
      "aria-label": text, dataset: { weight: String(weights[i]) },
      style: { background: colour(t), color: ink(t) } });
    span.addEventListener("mouseenter", () => readout(text));
    span.addEventListener("focus", () => readout(text));
    row.append(span);
  });
  return el("div", {}, row, legend(0, high, "pooled attention"));
}

function heatmap(id, caption, matrix, words, scale, special) {
  const n = matrix.length;
  const table = el("table", { className: "heatmap", id, tabIndex: 0,
    "aria-label": `${caption}: rows are queries, columns are keys; arrow keys move` });
  table.append(el("caption", { textContent: caption }));
  const head = el("tr", {}, el("th", { className: "axis", textContent: "query ↓ key →" }));
  words.forEach((w, j) => head.append(el("th", { scope: "col", textContent: w,
    className: special[j] ? "special" : "" })));
  table.append(el("thead", {}, head));
  const body = el("tbody");
  matrix.forEach((row, i) => {
    const tr = el("tr", {}, el("th", { scope: "row", textContent: words[i], className: special[i] ? "special" : "" }));
    row.forEach((value, j) => {
      const t = value / scale;
      const text = `${caption}: query '${words[i]}' → key '${words[j]}' = ${fmt(value)}`;
      tr.append(el("td", { title: text, dataset: { row: String(i), col: String(j), value: String(value) },
        style: { background: colour(t) } }));
    });
    body.append(tr);
  });
  table.append(body);
  let cursor = [0, 0];
  const cell = ([i, j]) => body.rows[i].cells[j + 1];
  const move = (next) => {
    cell(cursor).classList.remove("cursor");
    cursor = next;
    cell(cursor).classList.add("cursor");
    readout(cell(cursor).title);
  };
  table.addEventListener("mouseover", (event) => {
    if (event.target.tagName === "TD") readout(event.target.title);
  });
  table.addEventListener("focus", () => move(cursor));
  table.addEventListener("blur", () => cell(cursor).classList.remove("cursor"));
  table.addEventListener("keydown", (event) => {
    const steps = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    const step = steps[event.key];
    if (!step) return;
    event.preventDefault();
    move([Math.min(n - 1, Math.max(0, cursor[0] + step[0])), Math.min(n - 1, Math.max(0, cursor[1] + step[1]))]);
  });
  return table;
}

function maxOf(values) { return values.reduce((m, v) => Math.max(m, v), 0); }

// What a panel shows, after the view and the merging of word pieces: {labels, special,
// weights (per token or word), attribution (the same, or null), maps: [{id, caption, matrix,
// rollout, thumb, layer, head}]}; an encoder's "all" view holds every map as a thumbnail.
function shown(side, result, rollout, kind, state, text) {
  const groups = state.merge ? wordGroups(result, text) : null;
  const labels = groups ? groups.map((g) => g.label) : result.tokens;
  const special = groups ? groups.map((g) => g.special) : specialFlags(result);
  const vector = (w) => (groups ? mergeVector(w, groups) : w);
  const square = (m) => (groups ? mergeMatrix(m, groups) : m);
  // A text read as several windows has one pooled weight per token of the whole text (windows.js).
  const windowed = isWindowed(result);
  const weights = kind === "none" || (windowed && !Array.isArray(result.attention)) ? []
    : vector(windowed ? result.attention : pooledWeights(result, kind));
  const view = { labels, special, weights, attribution: attributionOf(result, groups), maps: [], groups };
  if ((kind !== "self" && kind !== "layers") || windowed) return view;
  const every = result.attention;  // [L][H][n][n]
  const add = (l, h, thumb) => view.maps.push({ id: `heatmap-${side}-l${l}-h${h}`,
    caption: `layer ${l + 1} · head ${h + 1}`, matrix: square(every[l][h]), rollout: false, thumb, layer: l, head: h });
  if (state.attention === "all") every.forEach((layer, l) => layer.forEach((_, h) => add(l, h, kind === "layers")));
  if (state.attention === "head") add(state.layer - 1, state.head - 1, false);
  if (state.attention !== "head") {
    view.maps.push({ id: `rollout-${side}`, caption: "rollout (all layers, heads averaged)",
      matrix: square(rollout.results[0].attention), rollout: true, thumb: false });
  }
  return view;
}

// The attribution beside attention: the coloured row, its legend, its cost, and its rank
// agreement with the pooled attention of the same tokens.
function attributionSection(side, reply, view, kind, method, high) {
  const result = reply.results[0];
  const box = el("div", { className: "attribution", id: `attribution-box-${side}` });
  if (isWindowed(result) && method === "shapley") {
    box.append(el("p", { className: "hint", textContent: "Shapley values are not offered for a text read as "
      + "several windows: choose occlusion (each window's drop, then the words of the one that matters most)." }));
    return box;
  }
  if (method === "none" || !view.attribution) {
    box.append(el("p", { className: "hint", textContent: "No attribution asked: choose occlusion or shapley above." }));
    return box;
  }
  const valued = result.value !== null && result.value !== undefined;  // a regression: its value explained
  const label = valued ? "the value" : result.label;
  const how = method === "shapley" ? "Shapley values of the words (KernelSHAP)"
    : `occlusion: the drop in ${valued ? "value" : "probability"} when the word is removed`
      + (isWindowed(result) ? " (words scored inside the window whose drop is largest, 0 elsewhere)" : "");
  const rows = result.attribution_rows || 0;
  const us = reply.timings ? reply.timings.attribution_us || 0 : 0;
  box.append(el("h3", { textContent: `Tokens, coloured by attribution (${method})` }),
    attributionRow(side, view.labels, view.attribution, view.special, high, label),
    divergingLegend(high, `attribution to '${label}': red supports it, blue works against it`),
    el("p", { className: "hint", id: `attribution-cost-${side}`, dataset: { rows: String(rows), us: String(us) },
      textContent: `${how}. Cost: ${rows} forward rows, ${(us / 1000).toFixed(1)} ms.` }));
  if (kind !== "none") box.append(agreementLine(side, rankAgreement(view.attribution, view.weights, view.special)));
  return box;
}

// extra: {model (its listing: problem type, thresholds), high (the attribution scale), method, topK,
// withSpecial, open(layer, head), layers, heads, timing ({grid_ms}: the time spent drawing thumbnails, added to),
// text (the sentence), window (the picked window of a text read as windows), pick(i) (keeps it)}.
function panel(side, title, reply, view, kind, scale, extra) {
  const result = reply.results[0];
  const box = el("section", { className: "panel", id: `panel-${side}`, "aria-label": title });
  box.append(el("h2", { textContent: title }), ...scoreView(side, extra.model, reply));  // scores.js
  if (result.answered_by) {  // a cascade: which member's answer this is
    box.append(el("p", { className: "hint", id: `answered-${side}`,
      textContent: `Answered by the cascade's ${result.answered_by}.` }));
  }
  if (result.truncated) box.append(el("p", { className: "hint", textContent: "The text was truncated to the model's length." }));
  if (isWindowed(result)) box.append(windowsSection(side, reply, view, extra.text, extra.model, extra.window, extra.pick));
  if (kind === "none") {
    box.append(el("p", { className: "hint", textContent: "This model has no attention weights to show." }),
      attributionSection(side, reply, view, kind, extra.method, extra.high));
    return box;
  }
  box.append(el("h3", { textContent: "Tokens, coloured by pooled attention" }),
    tokens(side, view.labels, view.weights, view.special),
    attributionSection(side, reply, view, kind, extra.method, extra.high));
  const top = topTokens(view.labels, view.weights, view.special, extra.topK, extra.withSpecial);
  if (top.length) {
    const list = el("ol", { className: "top", id: `top-${side}` });
    for (const t of top) list.append(el("li", { textContent: `${t.token} (#${t.index}) ${fmt(t.weight)}` }));
    const left = extra.withSpecial || !view.special.some(Boolean) ? "" : " (special tokens left out)";
    box.append(el("h3", { textContent: `Top ${top.length} tokens${left}` }), list);
  }
  if (kind === "pool") {
    box.append(el("p", { className: "hint", textContent: "This model pools attention into one weight per token: no layer × head maps." }));
    return box;
  }
  if (isWindowed(result)) {
    box.append(el("p", { className: "hint", id: `windowed-${side}`, textContent: "Read as windows: one pooled weight "
      + "per token of the whole text; layer × head maps and the rollout are not offered over windows." }));
    return box;
  }
  const thumbs = view.maps.filter((m) => m.thumb);
  if (thumbs.length) {
    const started = performance.now();
    const grid = thumbnails(side, thumbs, extra.layers, extra.heads, scale, extra.open);
    extra.timing.grid_ms += performance.now() - started;
    box.append(el("h3", { textContent: "Every layer × head (click a map to open it)" }), grid);
  }
  const maps = el("div", { className: "heatmaps" });
  for (const map of view.maps.filter((m) => !m.thumb)) {
    const own = map.rollout ? maxOf(map.matrix.flat()) || 1 : scale;
    maps.append(heatmap(map.id, map.caption, map.matrix, view.labels, own, view.special));
  }
  if (maps.children.length) box.append(el("h3", { textContent: "Attention maps (rows: queries, columns: keys)" }), maps);
  return box;
}
