// attnserve attention explorer: talks to the JSON API of the server that serves this page.
"use strict";
// Drawing lives in render.js (loaded first).

const models = new Map();

function showError(text) {
  const box = $("message");
  box.textContent = text;
  box.hidden = !text;
}

class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

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
  let document = null;
  try { document = await response.json(); } catch (err) { document = null; }
  if (!response.ok) {
    const error = (document && document.error) || {};
    throw new ApiError(response.status, error.code || `HTTP ${response.status}`,
      error.message || response.statusText);
  }
  return document;
}

function explain(err) {
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

// --- models -----------------------------------------------------------------------------
async function loadModels() {
  try {
    const listing = await api("/v1/models");
    const select = $("model");
    select.replaceChildren();
    for (const model of listing.models) {
      models.set(model.name, model);
      select.append(el("option", { value: model.name, textContent: `${model.name} (${model.family})` }));
    }
    if (!listing.models.length) showError("The server serves no model.");
    else { showError(""); fillVersions(); }
  } catch (err) {
    showError(explain(err));
  }
}

function fillVersions() {
  const model = models.get($("model").value);
  const select = $("version");
  select.replaceChildren(el("option", { value: "0", textContent: "latest" }));
  for (const v of (model ? model.versions : [])) select.append(el("option", { value: String(v), textContent: String(v) }));
}

function kindOf(model) { return model.attention ? model.attention.kind : "none"; }

async function classifyOne(name, version, text, kind, topK) {
  const base = { texts: [text], version, top_k: kind === "none" ? 0 : topK };
  const main = await api(`/v1/models/${encodeURIComponent(name)}:classify`,
    { ...base, attention: kind === "none" ? "none" : kind === "pool" ? "pooled" : "all" });
  const rollout = kind === "self" || kind === "layers"
    ? await api(`/v1/models/${encodeURIComponent(name)}:classify`, { ...base, top_k: 0, attention: "rollout" })
    : null;
  return { main, rollout };
}

async function classify(event) {
  event.preventDefault();
  const name = $("model").value;
  const model = models.get(name);
  if (!model) { showError("Pick a model first (the server lists none)."); return; }
  const kind = kindOf(model);
  const version = Number($("version").value || "0");
  const topK = Math.max(0, Math.min(20, Number($("top-k").value || "0")));
  const texts = [["a", "Sentence A", $("text-a").value]];
  if ($("compare").checked) texts.push(["b", "Sentence B", $("text-b").value]);
  const button = $("classify");
  button.disabled = true;
  document.body.dataset.state = "busy";
  try {
    const replies = [];
    for (const [side, title, text] of texts) {
      if (!text.trim()) throw new ApiError(400, "INVALID_ARGUMENT", `${title} is empty`);
      replies.push([side, title, await classifyOne(name, version, text, kind, topK)]);
    }
    // One colour scale for every layer × head map on the page, so maps compare directly.
    const scale = maxOf(replies.flatMap(([, , r]) =>
      kind === "self" || kind === "layers" ? r.main.results[0].attention.flat(3) : [])) || 1;
    const results = $("results");
    results.replaceChildren();
    if (kind === "self" || kind === "layers") {
      results.append(el("div", { className: "panel", id: "colour-bar", style: { gridColumn: "1 / -1" } },
        legend(0, scale, "heatmap colour scale (every layer × head map)")));
    }
    for (const [side, title, r] of replies) results.append(panel(side, title, r.main, r.rollout, kind, scale));
    showError("");
    document.body.dataset.state = "done";
  } catch (err) {
    showError(explain(err));
    document.body.dataset.state = "error";
  } finally {
    button.disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("controls").addEventListener("submit", classify);
  $("model").addEventListener("change", fillVersions);
  $("token").addEventListener("change", loadModels);  // a token typed after a refusal: list again
  $("compare").addEventListener("change", () => { $("text-b-label").hidden = !$("compare").checked; });
  for (const id of ["text-a", "text-b"]) {
    $(id).addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("controls").requestSubmit();
    });
  }
  loadModels().then(() => { document.body.dataset.ready = "true"; });
});
