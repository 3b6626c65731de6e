// attnserve attention explorer: long texts read whole, as windows (drawing only, as render.js).
// A reply asked with long_text "windows" carries per text its windows: {start, end (characters,
// Unicode code points, as the reply's offsets), probabilities (the window's own), weight (its
// weight in the answer; they sum to 1), attribution (with occlusion: the text's drop in the
// explained label's probability without it; else null)}. With several, the panel shows the whole document with
// each window underlined along it (overlapping windows on separate lanes), shaded by weight, a
// strip of one cell per window, and the picked window's probabilities and attention: the
// reply's pooled attention restricted to the window's tokens by their offsets (per-window maps
// are not sent).
"use strict";

function windowsOf(result) { return result && Array.isArray(result.windows) ? result.windows : []; }

function isWindowed(result) { return windowsOf(result).length > 1; }

// The window with the largest weight (the first of equals): the one picked at first.
function decisiveWindow(windows) {
  return windows.reduce((best, w, i) => (w.weight > windows[best].weight ? i : best), 0);
}

// Blue, darker for a heavier window (`t` its weight over the heaviest's); attention keeps viridis.
function windowShade(t, alpha = 1) {
  const v = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0));
  const fade = Math.round(225 - 170 * v);
  return `rgba(${fade - 20},${fade},255,${alpha})`;
}

// Each window on the first lane free where it starts (neighbouring windows overlap).
function windowLanes(windows) {
  const ends = [];
  return windows.map((w) => {
    let lane = ends.findIndex((end) => end <= w.start);
    if (lane < 0) { lane = ends.length; ends.push(0); }
    ends[lane] = w.end;
    return lane;
  });
}

// The text cut at every window edge: [{start, end, covering: [window indices]}].
function windowSegments(length, windows) {
  const edges = [...new Set([0, length, ...windows.flatMap((w) => [w.start, w.end])])]
    .filter((x) => x >= 0 && x <= length).sort((a, b) => a - b);
  const out = [];
  for (let k = 0; k + 1 < edges.length; k++) {
    const [start, end] = [edges[k], edges[k + 1]];
    out.push({ start, end, covering: windows.map((w, i) => i).filter((i) => windows[i].start <= start && end <= windows[i].end) });
  }
  return out;
}

function topScore(labels, probabilities) {
  if (!probabilities || !probabilities.length) return "no probabilities";
  const best = probabilities.reduce((b, p, i) => (p > probabilities[b] ? i : b), 0);
  return `${labels[best] === undefined ? best : labels[best]} ${pct(probabilities[best])}`;
}

function windowText(i, windows, labels) {
  const w = windows[i];
  const scores = (w.probabilities || []).map((p, k) => `${labels[k] === undefined ? k : labels[k]} ${pct(p)}`).join(", ");
  const drop = Number.isFinite(w.attribution) ? `; drop without it ${signed(w.attribution)}` : "";
  return `window ${i + 1} of ${windows.length}: characters ${w.start}–${w.end}, weight ${fmt(w.weight)}`
    + (scores ? `; ${scores}` : "") + drop;
}

// The tokens (or words) of the picked window and their pooled attention over the whole text.
function windowView(view, result, w) {
  const offsets = Array.isArray(result.offsets) && result.offsets.length === result.tokens.length ? result.offsets : null;
  const special = specialFlags(result);
  const inside = (i) => !special[i] && offsets && offsets[i][0] >= w.start && offsets[i][1] <= w.end;
  const groups = view.groups || result.tokens.map((_, i) => ({ indices: [i] }));
  const keep = groups.map((g, k) => k).filter((k) => groups[k].indices.every(inside));
  return { labels: keep.map((k) => view.labels[k]), weights: keep.map((k) => view.weights[k] || 0),
    special: keep.map(() => false) };
}

// The picked window's probabilities and attention.
function windowDetail(side, view, reply, labels, i) {
  const result = reply.results[0], windows = windowsOf(result), w = windows[i];
  const box = el("div", { className: "window-detail", id: `window-detail-${side}`, dataset: { window: String(i) } });
  box.append(el("h3", { textContent: `Window ${i + 1} of ${windows.length}: characters ${w.start}–${w.end}, weight ${fmt(w.weight)}` }));
  if (Number.isFinite(w.attribution)) {
    box.append(el("p", { className: "hint", id: `window-drop-${side}`, dataset: { attribution: String(w.attribution) },
      textContent: `Occlusion: the text's probability of its label drops by ${signed(w.attribution)} without this window.` }));
  }
  const p = w.probabilities || [];
  if (p.length) box.append(bars(labels, p, p.reduce((b, x, k) => (x > p[b] ? k : b), 0)));
  else box.append(el("p", { className: "hint", textContent: "The window's own scores are not sent for this model." }));
  const shown = windowView(view, result, w);
  if (!view.weights.length) {
    box.append(el("p", { className: "hint", textContent: "This model has no attention weights to show." }));
  } else if (!shown.labels.length) {
    box.append(el("p", { className: "hint", textContent: "The reply's tokens carry no offsets to place them in the window." }));
  } else {
    box.append(el("p", { className: "hint", textContent: "Its attention: the whole text's pooled attention on "
      + "this window's tokens (each token weighs what it weighs in the window where it has the most context, times "
      + "that window's weight); per-window maps are not sent." }),
    tokens(`window-${side}`, shown.labels, shown.weights, shown.special));
  }
  return box;
}

// The windows of a text read as several: the strip, the document with the windows along it, and
// the picked window (`pick`: its index; `onPick(i)` keeps it when the panel is redrawn).
function windowsSection(side, reply, view, text, model, pick, onPick) {
  const result = reply.results[0], windows = windowsOf(result), labels = reply.labels || [];
  const combine = model && model.windows ? model.windows.combine : "";
  const how = combine === "max" ? "the most confident window decides"
    : combine === "mean" ? "the mean of their logits decides"
      : combine === "head" ? "a document head weighs them" : "each counts by its weight";
  const peak = Math.max(...windows.map((w) => w.weight), 1e-9);
  let picked = Number.isInteger(pick) && pick >= 0 && pick < windows.length ? pick : decisiveWindow(windows);
  const box = el("div", { className: "windows", id: `windows-box-${side}` });
  box.append(el("h3", { textContent: `Read as ${windows.length} windows (${how})` }));

  const strip = el("div", { className: "window-strip", id: `windows-${side}`, role: "group",
    "aria-label": "windows by weight: pick one to see its attention" });
  const cells = windows.map((w, i) => {
    const said = windowText(i, windows, labels);
    const cell = el("button", { type: "button", className: "window-cell", title: said, "aria-label": said,
      textContent: `${i + 1}`, dataset: { window: String(i), start: String(w.start), end: String(w.end), weight: String(w.weight) },
      style: { background: windowShade(w.weight / peak), color: w.weight / peak > 0.6 ? "#fff" : "#111" } },
    el("small", { textContent: ` ${fmt(w.weight)} · ${topScore(labels, w.probabilities)}` }));
    cell.addEventListener("mouseenter", () => readout(said));
    cell.addEventListener("focus", () => readout(said));
    cell.addEventListener("click", () => choose(i));
    strip.append(cell);
    return cell;
  });

  // The document: characters as code points (the reply's offsets count them), cut at window edges.
  const chars = Array.from(text);
  const lanes = windowLanes(windows);
  const laneCount = Math.max(...lanes) + 1;
  const band = 4;  // px per lane under the text: a 3 px line and a 1 px gap
  const doc = el("div", { className: "document", id: `document-${side}`,
    style: { lineHeight: `calc(1.5em + ${band * laneCount}px)` } });
  const segments = windowSegments(chars.length, windows).map((s) => {
    const covering = s.covering;
    const lines = covering.map((i) => {  // window i's underline on its lane, shaded by its weight
      const c = windowShade(windows[i].weight / peak), low = band * lanes[i], high = low + band - 1;
      return `linear-gradient(to top, transparent ${low}px, ${c} ${low}px, ${c} ${high}px, transparent ${high}px)`;
    });
    const said = covering.length ? covering.map((i) => windowText(i, windows, labels)).join(" | ")
      : "outside every window (no tokens here)";
    const heaviest = covering.length ? Math.max(...covering.map((i) => windows[i].weight)) : 0;
    const span = el("span", { className: "segment", title: said, textContent: chars.slice(s.start, s.end).join(""),
      dataset: { windows: covering.join(" "), start: String(s.start), end: String(s.end) },
      style: { backgroundImage: lines.join(", ") || "none", backgroundColor: windowShade(heaviest / peak, 0.18),
        paddingBottom: `${band * laneCount}px` } });
    span.addEventListener("mouseenter", () => readout(said));
    if (covering.length) {
      span.addEventListener("click", () => {  // the next window covering it, from the picked one
        const at = covering.indexOf(picked);
        choose(covering[(at + 1) % covering.length]);
      });
    }
    return span;
  });
  const markFor = (i) => {  // a numbered mark where window i starts
    const t = windows[i].weight / peak;
    const mark = el("span", { className: "window-mark", textContent: `${i + 1}`, title: windowText(i, windows, labels),
      "aria-hidden": "true", dataset: { window: String(i) },
      style: { background: windowShade(t), color: t > 0.6 ? "#fff" : "#111" } });
    mark.addEventListener("click", () => choose(i));
    return mark;
  };
  doc.append(...segments.flatMap((s) => [
    ...windows.map((w, i) => i).filter((i) => windows[i].start === Number(s.dataset.start)).map(markFor), s]));

  const detail = el("div", {});
  function choose(i) {
    picked = i;
    onPick(i);
    cells.forEach((c, k) => { c.setAttribute("aria-pressed", String(k === i)); c.classList.toggle("picked", k === i); });
    segments.forEach((s) => s.classList.toggle("picked", s.dataset.windows.split(" ").includes(String(i))));
    detail.replaceChildren(windowDetail(side, view, reply, labels, i));
  }
  box.append(strip,
    el("p", { className: "hint", textContent: "Cells: one per window, darker for more weight (weight · top score). "
      + "Under the text: each window underlined where it reads, overlapping ones on their own lines; hover to read "
      + "a window's probabilities, click to see its attention." }),
    doc, detail);
  choose(picked);
  return box;
}
