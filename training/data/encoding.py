"""Texts -> one preallocated, right-padded id matrix, tokenized a chunk at a time.

An ``Encoding`` carries ids, offsets, token strings and masks, about 15 KB for a long review;
a corpus only needs the ids, 1-2 KB a row at 256 tokens. So each chunk's encodings are copied
into the matrix and dropped before the next chunk is encoded, and peak memory is the matrix
plus one chunk, whatever the number of rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
from tokenizers import Tokenizer

from attnserve.training.text.tokenizer import HEAD_SHARE, TRUNCATION_SIDES

# Rows per encode call: enough for its threads, few enough to stay small. On 20,000 long texts
# 4,096-row chunks of full encodings held 68 MB at once; 512 rows of ids only (encode_batch_fast,
# which skips the offsets) held 3 MB and took 40% less CPU.
CHUNK_ROWS = 512
PAD_ID = 0  # the tokenizer's [PAD] (attnserve.training.text.tokenizer checks it when loading)


@dataclass(frozen=True)
class EncodedTexts:
    input_ids: np.ndarray  # [N, max_len] int32, right-padded with PAD_ID
    lengths: np.ndarray  # [N] int32 tokens kept per row ([CLS] included), at most max_len
    full_lengths: np.ndarray  # [N] int32 tokens before truncation

    @property
    def truncated(self) -> int:
        """Rows that lost tokens beyond max_len."""
        return int((self.full_lengths > self.input_ids.shape[1]).sum())


def encode_texts(
    tok: Tokenizer,
    texts: Sequence[str],
    max_len: int,
    truncation: str = "head",
    *,
    chunk_rows: int = CHUNK_ROWS,
) -> EncodedTexts:
    """Encode ``texts`` into an [N, max_len] int32 matrix; a longer text keeps ``truncation``.

    A long text loses words, never the special tokens its tokenizer puts around it (our
    ``[CLS]`` in front, a pretrained ``[CLS] ... [SEP]`` at both ends): what the tokenizer's
    own truncation does, without its padding to each batch's longest row, with the
    untruncated lengths counted too. Clears the tokenizer's padding and truncation settings.
    """
    if isinstance(texts, str):
        raise TypeError("encode_texts expects a sequence of texts, not a single string")
    if truncation not in TRUNCATION_SIDES:
        raise ValueError(f"truncation must be one of {TRUNCATION_SIDES}, got {truncation!r}")
    specials = tok.num_special_tokens_to_add(is_pair=False)
    if max_len <= specials:
        raise ValueError(f"max_len must exceed the {specials} special token(s) added per text, got {max_len}")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    # Encoding without truncation yields the full length too, and the kept tokens are cut
    # from it here: right truncation (tokenizers' default) would count [CLS] the same way.
    tok.no_padding()
    tok.no_truncation()
    lead = _leading_specials(tok, specials)
    room = max_len - specials  # words kept of a long text
    words_front = {"head": room, "tail": 0}.get(truncation, max(1, int(HEAD_SHARE * room)))
    front, back = lead + words_front, max_len - lead - words_front  # tokens kept at each end
    n = len(texts)
    ids = np.full((n, max_len), PAD_ID, dtype=np.int32)  # [N, max_len]
    lengths = np.zeros(n, dtype=np.int32)  # [N]
    full = np.zeros(n, dtype=np.int32)  # [N]
    for start in range(0, n, chunk_rows):
        stop = min(start + chunk_rows, n)
        rows = [e.ids for e in tok.encode_batch_fast(list(texts[start:stop]), add_special_tokens=True)]
        full[start:stop] = [len(r) for r in rows]
        kept = np.minimum(full[start:stop], max_len)  # [C]
        lengths[start:stop] = kept
        cut = (r if len(r) <= max_len else r[:front] + r[len(r) - back :] for r in rows)
        flat = np.fromiter(chain.from_iterable(cut), dtype=np.int32, count=int(kept.sum()))
        # Row-major order of the True cells is the order of ``flat``: row by row, left to right.
        ids[start:stop][np.arange(max_len)[None, :] < kept[:, None]] = flat
        del rows, flat
    return EncodedTexts(ids, lengths, full)


def _leading_specials(tok: Tokenizer, specials: int) -> int:
    """How many of the ``specials`` tokens the tokenizer adds go before a text's words."""
    if specials == 0:
        return 0
    mask = tok.encode("a", add_special_tokens=True).special_tokens_mask
    lead = next((i for i, special in enumerate(mask) if not special), len(mask))
    return min(lead, specials)
