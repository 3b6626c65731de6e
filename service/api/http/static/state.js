// attnserve attention explorer: the page's state, kept in its address so a link reopens it.
//   ?model=car-order&version=0&text=...&compare=...&attention=head&layer=2&head=1&merge=1
//    &attribution=shapley&special=1&windows=1
// Every value read from the address is plain text: it is checked here, shown only through
// textContent or form values, and never parsed as markup.
"use strict";

const STATE_KEYS = ["model", "version", "text", "compare", "attention", "layer", "head", "merge",
  "attribution", "special", "windows"];
// What the page can draw per attention kind; the first is the default. For an encoder "all" is
// the model view: a grid of every layer × head thumbnail, each opening its full map.
const VIEWS = {
  layers: ["all", "head", "rollout"],
  self: ["all", "rollout"],
  pool: ["pooled"],
  none: ["none"],
};
// The attribution methods the page asks the service for; the first is the default.
const ATTRIBUTIONS = ["occlusion", "shapley", "none"];
const SHOWN_CHARS = 60;

class StateError extends Error {}

function quoted(value) {
  const text = String(value);
  return `"${text.length > SHOWN_CHARS ? text.slice(0, SHOWN_CHARS) + "…" : text}"`;
}

function readAddress(search) {  // the raw strings, nothing interpreted
  const params = new URLSearchParams(search);
  const raw = {};
  for (const key of STATE_KEYS) if (params.has(key)) raw[key] = params.get(key);
  return raw;
}

function addressOf(state) {
  const params = new URLSearchParams();
  for (const key of STATE_KEYS) {
    const value = state[key];
    if (value !== undefined && value !== null && value !== "" && value !== false) params.set(key, String(value));
  }
  return `${location.pathname}?${params}`;
}

function kindOf(model) { return model && model.attention ? model.attention.kind : "none"; }

function mapsOf(model) {  // [layers, heads]; a single self-attention map is 1 × 1
  const kind = kindOf(model);
  if (kind === "self") return [1, 1];
  if (kind !== "layers") return [0, 0];
  return [Math.max(1, model.attention.layers), Math.max(1, model.attention.heads)];
}

function defaultView(model) { return VIEWS[kindOf(model)][0]; }

function wholeNumber(value, name, low, high) {
  const n = /^\d{1,9}$/.test(value) ? Number(value) : NaN;
  if (!(n >= low && n <= high)) {
    throw new StateError(`${name} must be a whole number from ${low} to ${high}, not ${quoted(value)}.`);
  }
  return n;
}

// Raw address values + the served models -> a checked state, or a StateError in words.
function checkState(raw, models) {
  const names = Array.from(models.keys());
  const name = raw.model === undefined ? names[0] : raw.model;
  const model = models.get(name);
  if (!model) {
    throw new StateError(`The server serves no model called ${quoted(name)}; it serves: ${names.join(", ") || "none"}.`);
  }
  const state = { model: name, version: 0, text: raw.text || "", compare: raw.compare };
  if (raw.version !== undefined && raw.version !== "0" && raw.version !== "") {
    state.version = wholeNumber(raw.version, "version", 1, 1e9);
    if (!model.versions.includes(state.version)) {
      throw new StateError(`Model ${quoted(name)} has no version ${state.version}; it has ${model.versions.join(", ")} (or 0, the latest).`);
    }
  }
  const kind = kindOf(model);
  const [layers, heads] = mapsOf(model);
  const views = VIEWS[kind];
  const pick = raw.layer !== undefined || raw.head !== undefined;
  state.attention = raw.attention === undefined ? (pick && kind === "layers" ? "head" : defaultView(model)) : raw.attention;
  if (!views.includes(state.attention)) {
    throw new StateError(`Unknown attention view ${quoted(raw.attention)} for model ${quoted(name)} (attention kind ${kind}); choose ${views.join(", ")}.`);
  }
  if (kind === "layers") {
    state.layer = raw.layer === undefined ? layers : wholeNumber(raw.layer, "layer", 1, layers);
    state.head = raw.head === undefined ? 1 : wholeNumber(raw.head, "head", 1, heads);
  } else if (pick) {
    throw new StateError(`Model ${quoted(name)} has no layers and heads to pick (attention kind ${kind}).`);
  }
  if (raw.merge !== undefined && raw.merge !== "0" && raw.merge !== "1") {
    throw new StateError(`merge must be 0 or 1, not ${quoted(raw.merge)}.`);
  }
  state.merge = raw.merge === "1";
  state.attribution = raw.attribution === undefined ? ATTRIBUTIONS[0] : raw.attribution;
  if (!ATTRIBUTIONS.includes(state.attribution)) {
    throw new StateError(`Unknown attribution ${quoted(raw.attribution)}; choose ${ATTRIBUTIONS.join(", ")}.`);
  }
  if (raw.special !== undefined && raw.special !== "0" && raw.special !== "1") {
    throw new StateError(`special must be 0 or 1, not ${quoted(raw.special)}.`);
  }
  state.special = raw.special === "1";
  if (raw.windows !== undefined && raw.windows !== "0" && raw.windows !== "1") {
    throw new StateError(`windows must be 0 or 1, not ${quoted(raw.windows)}.`);
  }
  state.windows = raw.windows === "1";  // long texts read whole, as windows (long_text: "windows")
  return state;
}

// The address of a state, with only what differs from the defaults beside model and text.
function canonical(state, model) {
  const kind = kindOf(model);
  return addressOf({
    model: state.model,
    version: state.version || "",
    text: state.text,
    compare: state.compare,
    attention: state.attention === defaultView(model) ? "" : state.attention,
    layer: kind === "layers" && state.attention === "head" ? state.layer : "",
    head: kind === "layers" && state.attention === "head" ? state.head : "",
    merge: state.merge ? "1" : "",
    attribution: state.attribution === ATTRIBUTIONS[0] ? "" : state.attribution,
    special: state.special ? "1" : "",
    windows: state.windows ? "1" : "",
  });
}
