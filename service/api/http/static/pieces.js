// attnserve attention explorer: special tokens and word pieces (no state, no network).
// A reply's tokens are what the model saw: [CLS]/[SEP] around word pieces ("play", "##ing").
// "Merge word pieces" shows words instead: a word's column is the sum of its pieces' columns
// (the attention the word receives) and its row the mean of their rows (rows still sum to 1).
"use strict";

const SPECIAL = /^(\[(CLS|SEP|PAD|MASK|BOS|EOS)\]|<\/?s>|<(cls|sep|pad|mask)>)$/;
const WORD_CHAR = /[\p{L}\p{N}_]/u;

// Per token: is it added by the tokenizer? The reply's "special" flags, else the token's form.
function specialFlags(result) {
  if (Array.isArray(result.special) && result.special.length === result.tokens.length) {
    return result.special.map(Boolean);
  }
  return result.tokens.map((token) => SPECIAL.test(token));
}

function usableOffsets(result, text) {
  const offsets = result.offsets;
  if (!Array.isArray(offsets) || offsets.length !== result.tokens.length) return null;
  const ok = offsets.every((o) => Array.isArray(o) && o.length === 2 && Number.isInteger(o[0])
    && Number.isInteger(o[1]) && 0 <= o[0] && o[0] <= o[1] && o[1] <= text.length);
  return ok ? offsets : null;
}

// Groups of token indices, one per word: {indices, label, special}. With offsets a piece
// continues a word when it starts where the previous piece ended, between two word characters
// (or carries "##"); without them only the "##" prefix says so.
function wordGroups(result, text) {
  const special = specialFlags(result);
  const offsets = usableOffsets(result, text);
  const groups = [];
  result.tokens.forEach((token, i) => {
    const previous = groups[groups.length - 1];
    let joins = false;
    if (!special[i] && previous && !previous.special) {
      const last = previous.indices[previous.indices.length - 1];
      if (token.startsWith("##")) joins = true;
      else if (offsets) {
        const [start, end] = offsets[i];
        const before = offsets[last][1];
        joins = start === before && end > start && start > 0
          && WORD_CHAR.test(text[start - 1]) && WORD_CHAR.test(text[start]);
      }
    }
    if (joins) previous.indices.push(i);
    else groups.push({ indices: [i], special: special[i], label: token });
  });
  for (const group of groups) {
    if (group.special || group.indices.length === 1 && !group.label.startsWith("##")) continue;
    if (offsets) {
      const first = offsets[group.indices[0]], last = offsets[group.indices[group.indices.length - 1]];
      group.label = text.slice(first[0], last[1]);
    } else {
      group.label = group.indices.map((i) => result.tokens[i].replace(/^##/, "")).join("");
    }
  }
  return groups;
}

function mergeVector(weights, groups) {  // [n] -> [words]: a word receives its pieces' sum
  return groups.map((g) => g.indices.reduce((s, i) => s + weights[i], 0));
}

function mergeMatrix(matrix, groups) {  // [n][n] -> [words][words]: rows averaged, columns summed
  return groups.map((rows) => groups.map((cols) => rows.indices.reduce(
    (s, i) => s + cols.indices.reduce((t, j) => t + matrix[i][j], 0), 0) / rows.indices.length));
}
