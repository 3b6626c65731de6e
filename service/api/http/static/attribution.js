// attnserve attention explorer: attributions (how much each word moves the probability of the
// predicted label), their diverging colours, and their rank agreement with attention. No state,
// no network; render.js is loaded first.
"use strict";

// ColorBrewer RdBu, white at 0: red supports the label, blue works against it (both ends stay
// apart for every common colour-vision deficiency; lightness says how much).
const AGAINST = ["#ffffff", "#d1e5f0", "#92c5de", "#4393c3", "#2166ac", "#053061"];
const FOR = ["#ffffff", "#fddbc7", "#f4a582", "#d6604d", "#b2182b", "#67001f"];

// t in [-1, 1] -> a CSS colour; 0 is white.
function diverging(t) {
  const v = Math.min(1, Math.max(-1, Number.isFinite(t) ? t : 0));
  const stops = v < 0 ? AGAINST : FOR;
  const x = Math.abs(v) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(x));
  const a = rgb(stops[i]), b = rgb(stops[i + 1]), f = x - i;
  return `rgb(${a.map((c, k) => Math.round(c + (b[k] - c) * f)).join(",")})`;
}

function divergingInk(t) { return Math.abs(t) > 0.6 ? "#fff" : "#111"; }

function signed(x) { return `${x > 0 ? "+" : x < 0 ? "−" : ""}${Math.abs(Number(x)).toFixed(4)}`; }

// Per shown token or word: the reply's scores (one per token; every piece of a word carries
// the word's score, so a merged word takes its pieces' mean, which is that score).
function attributionOf(result, groups) {
  const scores = Array.isArray(result.attribution) ? result.attribution.map(Number) : null;
  if (!scores || scores.length !== result.tokens.length) return null;
  if (!groups) return scores;
  return groups.map((g) => g.indices.reduce((s, i) => s + scores[i], 0) / g.indices.length);
}

// 1-based ranks, ties given their mean rank (as scipy.stats.rankdata's "average").
function ranks(values) {
  const order = values.map((_, i) => i).sort((a, b) => values[a] - values[b]);
  const out = new Array(values.length);
  for (let i = 0; i < order.length;) {
    let j = i;
    while (j + 1 < order.length && values[order[j + 1]] === values[order[i]]) j++;
    for (let k = i; k <= j; k++) out[order[k]] = (i + j) / 2 + 1;
    i = j + 1;
  }
  return out;
}

// Spearman's rho: the Pearson correlation of the ranks; NaN under 2 values or for a constant.
function spearman(a, b) {
  const n = a.length;
  if (n < 2 || b.length !== n) return NaN;
  const ra = ranks(a), rb = ranks(b);
  const mean = (n + 1) / 2;
  let sab = 0, saa = 0, sbb = 0;
  for (let i = 0; i < n; i++) {
    const x = ra[i] - mean, y = rb[i] - mean;
    sab += x * y; saa += x * x; sbb += y * y;
  }
  return saa > 0 && sbb > 0 ? sab / Math.sqrt(saa * sbb) : NaN;
}

// Rank agreement of attribution and attention over the tokens (or words) that are not special.
function rankAgreement(scores, weights, special) {
  const keep = scores.map((_, i) => i).filter((i) => !special[i]);
  return { rho: spearman(keep.map((i) => scores[i]), keep.map((i) => weights[i])), n: keep.length };
}

// The k tokens (or words) with the most attention, largest first; special ones only when asked.
function topTokens(labels, weights, special, k, withSpecial) {
  return labels.map((label, index) => ({ index, token: label, weight: weights[index] }))
    .filter((t) => withSpecial || !special[t.index])
    .sort((a, b) => b.weight - a.weight || a.index - b.index)
    .slice(0, k);
}

function divergingLegend(high, caption) {
  const stops = [...AGAINST.slice(1).reverse(), ...FOR].map((c, i, all) =>
    `${c} ${(100 * i / (all.length - 1)).toFixed(0)}%`).join(",");
  return el("div", { className: "legend" }, el("span", { textContent: caption }),
    el("span", { textContent: signed(-high) }),
    el("span", { className: "ramp", role: "img",
      "aria-label": `colour scale from ${signed(-high)} (blue, against) through 0 (white) to ${signed(high)} (red, for)`,
      style: { background: `linear-gradient(to right, ${stops})` } }),
    el("span", { textContent: signed(high) }));
}

// The sentence's tokens coloured by attribution: one cell per token, `high` the scale's end.
function attributionRow(side, words, scores, special, high, label) {
  const row = el("div", { className: "tokens", id: `attribution-${side}` });
  words.forEach((word, i) => {
    const t = scores[i] / high;
    const how = scores[i] > 0 ? `supports '${label}'` : scores[i] < 0 ? `works against '${label}'` : "no effect";
    const text = special[i]
      ? `token ${i} '${word}': added by the tokenizer, not attributed`
      : `token ${i} '${word}': attribution ${signed(scores[i])} (${how})`;
    const span = el("span", { className: special[i] ? "token special" : "token", textContent: word,
      tabIndex: 0, title: text, "aria-label": text, dataset: { attribution: String(scores[i]) },
      style: { background: diverging(t), color: divergingInk(t) } });
    span.addEventListener("mouseenter", () => readout(text));
    span.addEventListener("focus", () => readout(text));
    row.append(span);
  });
  return row;
}

const AGREEMENT_HELP = "Spearman's rank correlation between the attribution scores and the pooled "
  + "attention of the same tokens, special tokens left out: +1 when both rank the tokens alike, "
  + "0 when their orders are unrelated, −1 when opposite. Attention says where the model looked; "
  + "attribution what changed its answer.";

function agreementLine(side, agreement) {
  const value = Number.isFinite(agreement.rho) ? agreement.rho.toFixed(3) : "undefined";
  const why = Number.isFinite(agreement.rho) ? "" : " (fewer than 2 tokens, or one of them constant)";
  return el("p", { className: "agreement", id: `agreement-${side}`, title: AGREEMENT_HELP,
    dataset: { rho: Number.isFinite(agreement.rho) ? String(agreement.rho) : "" },
    textContent: `Rank agreement with attention: ρ = ${value} over ${agreement.n} tokens${why}.` },
  el("span", { className: "hint", textContent: " Spearman's ρ between attribution and pooled attention; "
    + "+1: same order, 0: unrelated, −1: opposite." }));
}
