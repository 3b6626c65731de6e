// attnserve attention explorer: talks to the JSON API of the server that serves this page.
// Drawing lives in render.js, scores in scores.js, attributions in attribution.js, the model view's thumbnails in
// grid.js, word pieces in pieces.js, long texts read as windows in windows.js, the address in
// state.js, downloads in picture.js (all loaded first).
"use strict";

const models = new Map();
let drawn = null;  // {state, model, kind, replies: [{side, title, text, main, mainText, rollout}]}

function showError(text) {
  const box = $("message");
  box.textContent = text;
  box.hidden = !text;
}

class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

// -> {document, text}: the parsed reply and the bytes it came in (the JSON download).
async function api(path, body) {
  const headers = { "Accept": "application/json" };
  const token = $("token").value.trim();
  if (token) headers["Authorization"] = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, { method: body === undefined ? "GET" : "POST", headers,
      body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    throw new ApiError(0, "UNAVAILABLE", "the server cannot be reached");
  }
  const text = await response.text();
  let document = null;
  try { document = JSON.parse(text); } catch (err) { document = null; }
  if (!response.ok) {
    const error = (document && document.error) || {};
    throw new ApiError(response.status, error.code || `HTTP ${response.status}`,
      error.message || response.statusText);
  }
  return { document, text };
}

function explain(err) {
  if (err instanceof StateError) return `This link cannot be shown: ${err.message}`;
  if (!(err instanceof ApiError)) return `Unexpected error: ${err.message}`;
  const hints = {
    UNAUTHENTICATED: "The server requires a token: paste an inference token into the Token field.",
    PERMISSION_DENIED: "This token may not call the classify API.",
    RESOURCE_EXHAUSTED: "The server is busy (queue full); try again in a moment.",
    UNAVAILABLE: "The server is starting or shutting down; try again shortly.",
    DEADLINE_EXCEEDED: "The server did not answer in time.",
  };
  const hint = hints[err.code] ? ` ${hints[err.code]}` : "";
  return `Refused (${err.code}): ${err.message}.${hint}`;
}

// --- models and the form -----------------------------------------------------------------
async function loadModels() {
  try {
    const listing = (await api("/v1/models")).document;
    const select = $("model");
    select.replaceChildren();
    models.clear();
    for (const model of listing.models) {
      models.set(model.name, model);
      select.append(el("option", { value: model.name, textContent: `${model.name} (${model.family})` }));
    }
    if (!listing.models.length) { showError("The server serves no model."); return false; }
    showError("");
    fillModelControls(checkState({ model: $("model").value }, models));
    return true;
  } catch (err) {
    showError(explain(err));
    return false;
  }
}

function options(select, values, labels) {
  select.replaceChildren(...values.map((v, i) => el("option", { value: String(v), textContent: labels[i] })));
}

// The version, attention, layer and head pickers of a model, set to `state`.
function fillModelControls(state) {
  const model = models.get(state.model);
  $("model").value = state.model;
  options($("version"), [0, ...model.versions], ["latest", ...model.versions.map(String)]);
  $("version").value = String(state.version);
  const kind = kindOf(model);
  const [layers, heads] = mapsOf(model);
  const names = { all: kind === "layers" ? "model view: every layer × head" : "every layer × head map",
    head: "one layer and head", rollout: "rollout",
    pooled: "pooling weights", none: "none" };
  options($("attention"), VIEWS[kind], VIEWS[kind].map((v) => names[v]));
  $("attention").value = state.attention;
  const count = (n) => Array.from({ length: n }, (_, i) => i + 1);
  options($("layer"), count(layers), count(layers).map(String));
  options($("head"), count(heads), count(heads).map(String));
  if (kind === "layers") { $("layer").value = String(state.layer); $("head").value = String(state.head); }
  $("merge").checked = state.merge;
  $("attribution").value = state.attribution;
  $("special").checked = state.special;
  $("windows").checked = state.windows;
  $("attention-label").hidden = VIEWS[kind].length < 2;
  $("layer-label").hidden = $("head-label").hidden = kind !== "layers" || state.attention !== "head";
  $("merge-label").hidden = kind === "none";
  $("scoring").textContent = problemText(model);
}

function formState() {
  const raw = { model: $("model").value, version: $("version").value, text: $("text-a").value,
    attention: $("attention").value, merge: $("merge").checked ? "1" : "0",
    attribution: $("attribution").value, special: $("special").checked ? "1" : "0",
    windows: $("windows").checked ? "1" : "0" };
  if ($("compare").checked) raw.compare = $("text-b").value;
  if (!$("layer-label").hidden) { raw.layer = $("layer").value; raw.head = $("head").value; }
  return checkState(raw, models);
}

function fillForm(state) {
  fillModelControls(state);
  $("text-a").value = state.text;
  $("compare").checked = state.compare !== undefined;
  $("text-b-label").hidden = !$("compare").checked;
  if (state.compare !== undefined) $("text-b").value = state.compare;
}

// --- classifying and drawing -------------------------------------------------------------
// The main call carries the attribution (its rows run with the call); rollout is a second call.
// With `windows`, the text is first asked as windows with what windows offer (pooled attention, no
// attribution): a text over max_len comes back as several windows and is drawn so (asked again
// with occlusion when it is picked; shapley is not offered over windows); one that fits is asked
// again as ever (its maps, rollout and attribution).
async function classifyOne(name, version, text, kind, topK, attribution, windows) {
  const base = { texts: [text], version, top_k: kind === "none" ? 0 : topK };
  const path = `/v1/models/${encodeURIComponent(name)}:classify`;
  if (windows) {
    base.long_text = "windows";
    const asked = { ...base, attention: kind === "none" ? "none" : "pooled" };
    let whole = await api(path, asked);
    if (isWindowed(whole.document.results[0])) {
      if (attribution === "occlusion") whole = await api(path, { ...asked, attribution });
      return { main: whole.document, mainText: whole.text, rollout: null };
    }
  }
  const asked = attribution === "none" ? {} : { attribution };
  const main = await api(path, { ...base, ...asked,
    attention: kind === "none" ? "none" : kind === "pool" ? "pooled" : "all" });
  const rollout = kind === "self" || kind === "layers"
    ? (await api(path, { ...base, top_k: 0, attention: "rollout" })).document : null;
  return { main: main.document, mainText: main.text, rollout };
}

// Open one layer × head map from the model view's grid (a new entry in the history).
function openMap(side, layer, head) {
  drawn.state = { ...drawn.state, attention: "head", layer, head };
  fillModelControls(drawn.state);
  draw();
  history.pushState(null, "", canonical(drawn.state, drawn.model));
  const map = $(`heatmap-${side}-l${layer - 1}-h${head - 1}`);
  if (map) { map.scrollIntoView({ block: "nearest" }); map.focus({ preventScroll: true }); }
}

function draw() {
  const { state, kind, replies } = drawn;
  const views = replies.map((r) => shown(r.side, r.main.results[0], r.rollout, kind, state, r.text));
  // One attribution scale for the page (symmetric around 0), so sentences compare directly.
  const high = maxOf(views.flatMap((v) => (v.attribution || []).filter((_, i) => !v.special[i]).map(Math.abs))) || 1;
  const [layers, heads] = mapsOf(drawn.model);
  const timing = { grid_ms: 0 };
  const topK = Math.max(0, Math.min(20, Number($("top-k").value || "0")));
  // One colour scale for every layer × head map on the page, so maps compare directly.
  const scale = maxOf(views.flatMap((v) => v.maps.filter((m) => !m.rollout).map((m) => maxOf(m.matrix.flat())))) || 1;
  const results = $("results");
  results.replaceChildren();
  if (views.some((v) => v.maps.some((m) => !m.rollout))) {
    results.append(el("div", { className: "panel", id: "colour-bar", style: { gridColumn: "1 / -1" } },
      legend(0, scale, "heatmap colour scale (every layer × head map)")));
  }
  replies.forEach((r, k) => {
    const box = panel(r.side, r.title, r.main, views[k], kind, scale, { model: drawn.model, high,
      method: state.attribution, topK, withSpecial: state.special, layers, heads, timing,
      open: (l, h) => openMap(r.side, l, h), text: r.text, window: r.window, pick: (i) => { r.window = i; } });
    const heading = `${r.main.model} v${r.main.version}: ${r.text}`;
    const png = el("button", { type: "button", id: `download-png-${r.side}`, textContent: "Download PNG" });
    const json = el("button", { type: "button", id: `download-json-${r.side}`, textContent: "Download JSON" });
    const label = scoreCaption(drawn.model, r.main.results[0]);
    const csv = el("button", { type: "button", id: `download-csv-${r.side}`, textContent: "Download CSV" });
    const extra = { high, method: state.attribution };
    png.addEventListener("click", () => savePng(heading, label, views[k], scale, extra,
      `attention-${r.side}.png`).catch((err) => showError(explain(err))));
    json.addEventListener("click", () => saveJson(r.mainText, `reply-${r.side}.json`));
    csv.addEventListener("click", () => saveCsv(views[k], `tokens-${r.side}.csv`));
    if (kind !== "none") box.append(el("div", { className: "downloads" }, png, csv, json));
    else box.append(el("div", { className: "downloads" }, csv, json));
    results.append(box);
  });
  document.body.dataset.gridMs = timing.grid_ms.toFixed(2);
  $("link").value = new URL(canonical(state, drawn.model), location.href).href;
  $("share").hidden = false;
}

// Classify the sentences of `state` and draw them; `how` is "push" (a new sentence tried),
// "replace" (the address already says it) or "none".
async function show(state, how) {
  const model = models.get(state.model);
  const kind = kindOf(model);
  const topK = Math.max(0, Math.min(20, Number($("top-k").value || "0")));
  const texts = [["a", "Sentence A", state.text]];
  if (state.compare !== undefined) texts.push(["b", "Sentence B", state.compare]);
  $("classify").disabled = true;
  document.body.dataset.state = "busy";
  try {
    const replies = [];
    for (const [side, title, text] of texts) {
      if (!text.trim()) throw new ApiError(400, "INVALID_ARGUMENT", `${title} is empty`);
      replies.push({ side, title, text,
        ...(await classifyOne(state.model, state.version, text, kind, topK, state.attribution, state.windows)) });
    }
    drawn = { state, model, kind, replies };
    draw();
    const address = canonical(state, model);
    if (how === "push" && address !== location.pathname + location.search) history.pushState(null, "", address);
    else if (how !== "none") history.replaceState(null, "", address);
    showError("");
    document.body.dataset.state = "done";
  } catch (err) {
    showError(explain(err));
    document.body.dataset.state = "error";
  } finally {
    $("classify").disabled = false;
  }
}

function submit(event) {
  event.preventDefault();
  let state;
  try { state = formState(); } catch (err) { showError(explain(err)); document.body.dataset.state = "error"; return; }
  show(state, "push");
}

// A picker of the view changed: redraw what is on the page (no call) and keep the address.
function redraw() {
  let state;
  try { state = formState(); } catch (err) { showError(explain(err)); return; }
  fillModelControls(state);
  if (!drawn || drawn.state.model !== state.model || drawn.state.version !== state.version) return;
  drawn.state = { ...drawn.state, attention: state.attention, layer: state.layer, head: state.head, merge: state.merge,
    special: state.special };
  draw();
  history.replaceState(null, "", canonical(drawn.state, drawn.model));
}

// The attribution method or the windows box changed: ask the service again for what is drawn,
// and keep the address.
function reask() {
  if (!drawn) return;
  let state;
  try { state = formState(); } catch (err) { showError(explain(err)); return; }
  if (drawn.state.model !== state.model || drawn.state.version !== state.version) return;
  show({ ...drawn.state, attribution: state.attribution, windows: state.windows }, "replace");
}

// Open what the address says: fill the form and, when it holds a sentence, classify it.
async function openAddress() {
  const raw = readAddress(location.search);
  // "idle" only after a classification (back to an address without a sentence): a fresh page
  // has no state until its first classification.
  const idle = () => { if (document.body.dataset.state) document.body.dataset.state = "idle"; };
  if (!Object.keys(raw).length) { idle(); return; }
  let state;
  try {
    state = checkState(raw, models);
  } catch (err) {
    $("results").replaceChildren();
    $("share").hidden = true;
    drawn = null;
    showError(explain(err));
    document.body.dataset.state = "error";
    return;
  }
  fillForm(state);
  if (state.text) await show(state, "none");
  else idle();
}

async function copyLink() {
  const link = $("link");
  try {
    await navigator.clipboard.writeText(link.value);
  } catch (err) {  // no clipboard permission: select it for Ctrl+C and try the old way
    link.select();
    document.execCommand("copy");
  }
  $("copied").textContent = "Link copied.";
}

document.addEventListener("DOMContentLoaded", () => {
  $("controls").addEventListener("submit", submit);
  $("model").addEventListener("change", () => {  // another model: its views, the same attribution and windows
    fillModelControls(checkState({ model: $("model").value, attribution: $("attribution").value,
      special: $("special").checked ? "1" : "0", windows: $("windows").checked ? "1" : "0" }, models));
  });
  for (const id of ["attention", "layer", "head", "merge", "special"]) $(id).addEventListener("change", redraw);
  $("attribution").addEventListener("change", reask);
  $("windows").addEventListener("change", reask);
  $("token").addEventListener("change", () => loadModels().then((ok) => ok && openAddress()));
  $("compare").addEventListener("change", () => { $("text-b-label").hidden = !$("compare").checked; });
  $("copy-link").addEventListener("click", copyLink);
  for (const id of ["text-a", "text-b"]) {
    $(id).addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("controls").requestSubmit();
    });
  }
  window.addEventListener("popstate", openAddress);
  loadModels()
    .then((ok) => (ok ? openAddress() : undefined))
    .finally(() => { document.body.dataset.ready = "true"; });
});
