// attnserve attention explorer: what a reply's scores say (drawing only, as render.js). A
// single-label model's probabilities (a softmax; the top one is the label), a multi-label
// model's probability per label against that label's threshold (the labels at or over it are
// assigned), a regression model's value. The reply says which: a multi-label result has
// `assigned` (a list, possibly empty), a regression result has `value`; the model gives the
// thresholds.
"use strict";

const MULTI_LABEL = "multi_label_classification", REGRESSION = "regression";

function pct(p, digits = 1) { return `${(100 * p).toFixed(digits)}%`; }
function cut(t) { return String(Number(Number(t).toPrecision(4))); }  // float32 0.3499… -> "0.35"

function problemOf(model, result) {
  if (result && result.value !== null && result.value !== undefined) return REGRESSION;
  if (result && Array.isArray(result.assigned)) return MULTI_LABEL;
  return (model && model.problem_type) || "single_label_classification";
}

// One line about a model's scores: its problem type and, for multi-label, each label's threshold.
function problemText(model) {
  const problem = problemOf(model, null);
  if (problem === REGRESSION) return "Regression: the model predicts one value per text.";
  if (problem !== MULTI_LABEL) return "Single-label: a softmax over the labels; the most probable one is the label.";
  const cuts = model.labels.map((label, i) => `${label} ≥ ${cut(model.thresholds[i])}`).join(", ");
  return `Multi-label: a sigmoid per label; each label is assigned at or over its threshold (${cuts}).`;
}

// Multi-label: every label's bar in label order with its threshold marked; the assigned ones
// highlighted (bold, full colour, "assigned" in their description).
function thresholdBars(side, labels, probabilities, thresholds, assigned) {
  const grid = el("div", { className: "bars thresholds", id: `bars-${side}`, role: "list" });
  labels.forEach((label, i) => {
    const p = probabilities[i], on = assigned.includes(label);
    const t = thresholds.length === labels.length ? thresholds[i] : null;
    const said = `${label}: ${pct(p)}${t === null ? "" : `, threshold ${pct(t)}`}${on ? ", assigned" : ""}`;
    const bar = el("div", { className: "bar", role: "img", "aria-label": said, title: said },
      el("div", { className: on ? "fill on" : "fill", style: { width: `${(100 * p).toFixed(2)}%` } }));
    if (t !== null) bar.append(el("div", { className: "cut", style: { left: `${(100 * t).toFixed(2)}%` } }));
    grid.append(
      el("span", { textContent: label, className: on ? "assigned" : "", dataset: { assigned: on ? "1" : "0" } }),
      bar,
      el("span", { className: "num", textContent: t === null ? pct(p) : `${pct(p, 2)} / ${pct(t, 2)}` }));
  });
  const key = "bar: the label's probability; red mark and second number: its threshold; bold: assigned";
  return el("div", {}, grid, el("p", { className: "hint", textContent: key }));
}

// The panel's head: the label and its bars (single-label), the assigned labels and every
// label's bar against its threshold (multi-label), or the value alone (regression).
function scoreView(side, model, reply) {
  const result = reply.results[0];
  const problem = problemOf(model, result);
  const head = (text) => el("div", { className: "label", id: `label-${side}`, dataset: { problem }, textContent: text });
  if (problem === REGRESSION) return [head(`value ${fmt(result.value)}`)];
  if (problem !== MULTI_LABEL) return [head(result.label), bars(reply.labels, result.probabilities, result.label_id)];
  const assigned = result.assigned || [];
  return [head(assigned.length ? assigned.join(", ") : "no label over its threshold"),
    thresholdBars(side, reply.labels, result.probabilities, (model && model.thresholds) || [], assigned)];
}

// The picture's caption: "positive (97.1%)", "assigned: a, b" or "value 0.1234".
function scoreCaption(model, result) {
  const problem = problemOf(model, result);
  if (problem === REGRESSION) return `value ${fmt(result.value)}`;
  if (problem === MULTI_LABEL) {
    return result.assigned.length ? `assigned: ${result.assigned.join(", ")}` : "no label over its threshold";
  }
  return `${result.label} (${pct(result.probabilities[result.label_id])})`;
}
