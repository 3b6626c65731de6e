"""Turn request texts into token ids with the bundle's own `tokenizer.json`.

The tokenizer is part of a model version: the lifecycle builds one `TextTokenizer` per version
and proves it on the bundle's golden cases; the request path encodes each call's texts with
it. Encoding runs in Rust (`tokenizers`); Python only loops once per text, never per token.
Ids are not padded here: each batch is padded to its own longest text (runtime.pad_ids).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Encoding, Tokenizer

from attnserve.service.bundle import LongTexts, Truncation
from attnserve.service.errors import InvalidArgument

TokenIds = Sequence[int] | np.ndarray
_CUT_SIDE: dict[Truncation, str] = {"head": "right", "tail": "left"}  # tokenizers names the side cut off


@dataclass(slots=True)
class EncodedTexts:
    """One request's texts as token ids (each row unpadded, 1 <= length <= max_len)."""

    ids: list[TokenIds]
    lengths: list[int]
    truncated: list[bool]
    encodings: list[Encoding] | None = None  # kept to produce token strings on demand

    def __len__(self) -> int:
        return len(self.lengths)

    def row(self, index: int) -> tuple[list[str], list[tuple[int, int]], list[bool]]:
        """Text `index`'s tokens; per token, its [start, end) character offsets into the request
        text (Python str indices; tokens the tokenizer's template added, [CLS] and [SEP], have
        (0, 0)); and whether the tokenizer added it (a special token): as a reply writes them."""
        if self.encodings is None:
            return [], [], []
        encoding = self.encodings[index]
        return list(encoding.tokens), list(encoding.offsets), list(map(bool, encoding.special_tokens_mask))

    def tokens(self, index: int) -> list[str]:
        if self.encodings is None:
            return []
        return list(self.encodings[index].tokens)

    @classmethod
    def from_ids(cls, rows: Sequence[TokenIds]) -> EncodedTexts:
        """Rows tokenized by the caller (e.g. an INPUT_IDS tensor, padding already removed)."""
        return cls(ids=list(rows), lengths=[len(row) for row in rows], truncated=[False] * len(rows))


class TextTokenizer:
    """Validates and encodes texts for one model version."""

    def __init__(
        self,
        tokenizer_path: Path,
        max_len: int,
        *,
        reject_long: bool,
        max_text_chars: int,
        truncation: Truncation | None = None,
        windows: LongTexts | None = None,
    ) -> None:
        """``truncation``: the end of a long text to keep, as the manifest records it; None
        (bundles written before the manifest recorded it) keeps what tokenizer.json says."""
        try:
            tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as exc:  # tokenizers raises a bare Exception on malformed JSON
            raise ValueError(f"{tokenizer_path} is not a valid tokenizers file: {exc}") from None
        if truncation is not None:
            # A pretrained checkpoint's tokenizer.json knows nothing of how it was fine-tuned.
            direction = _CUT_SIDE[truncation]
        else:
            saved = tokenizer.truncation
            direction = saved["direction"] if saved is not None else "right"
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=max_len, direction=direction)
        self._tokenizer = tokenizer
        self.unk_id: int | None = tokenizer.token_to_id("[UNK]")
        # Tokens an attribution never removes nor scores ([CLS], [SEP], [PAD], ...).
        self.special_ids = frozenset(
            token_id for token_id, token in tokenizer.get_added_tokens_decoder().items() if token.special
        )
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.max_len = max_len
        self.reject_long = reject_long
        self.max_text_chars = max_text_chars
        self.windows = windows or LongTexts.default(max_len)
        self._uncut: Tokenizer | None = None  # built by the first call with windows

    def encode(self, texts: Sequence[str], reject_long: bool | None = None) -> EncodedTexts:
        """Encode `texts`; InvalidArgument names the first offending text and the limit
        (`reject_long`: refuse a text over max_len rather than cut it; None: the server's choice)."""
        if max(map(len, texts), default=0) > self.max_text_chars:  # refused off the common path
            self._refuse_chars(texts)
        reject = self.reject_long if reject_long is None else reject_long
        if len(texts) == 1:
            encodings = [self._tokenizer.encode(texts[0])]
        else:
            encodings = self._tokenizer.encode_batch(list(texts))
        ids: list[TokenIds] = []
        lengths: list[int] = []
        truncated: list[bool] = []
        for index, encoding in enumerate(encodings):
            row = encoding.ids
            if not row:
                raise InvalidArgument(
                    f"texts[{index}] has no tokens (it is empty after normalisation)", field="texts"
                )
            cut = bool(encoding.overflowing)
            if cut and reject:
                raise InvalidArgument(
                    f"texts[{index}] has more than the model's max_len of {self.max_len} tokens "
                    "(the server rejects long texts; shorten it)",
                    field="texts",
                )
            ids.append(row)
            lengths.append(len(row))
            truncated.append(cut)
        return EncodedTexts(ids=ids, lengths=lengths, truncated=truncated, encodings=encodings)

    def _refuse_chars(self, texts: Sequence[str]) -> None:
        """Name the first text over `max_text_chars`."""
        for index, text in enumerate(texts):
            if len(text) > self.max_text_chars:
                raise InvalidArgument(
                    f"texts[{index}] has {len(text)} characters; the limit is {self.max_text_chars}",
                    field="texts",
                )

    def encode_windows(self, texts: Sequence[str]) -> tuple[list[list[Encoding]], list[Encoding]]:
        """Per text its windows (one where it fits) and its whole encoding; a text of more than
        the policy's `max_windows` windows is INVALID_ARGUMENT naming both counts."""
        if max(map(len, texts), default=0) > self.max_text_chars:
            self._refuse_chars(texts)
        uncut = self._uncut or self._make_uncut()
        items = list(texts)
        # One tokenization per text: its tokens without specials, cut into windows sharing the
        # stride, then each given its special tokens, as tokenizers' own overflow does it.
        raw = uncut.encode_batch(items, add_special_tokens=False) if len(items) > 1 else [
            uncut.encode(items[0], add_special_tokens=False)
        ]
        whole = [uncut.post_process(encoding) for encoding in raw]
        room = self.windows.window - uncut.num_special_tokens_to_add(False)
        cut = []
        for encoding in raw:
            encoding.truncate(room, stride=self.windows.stride)
            cut.append(uncut.post_process(encoding))
        limit = self.windows.max_windows
        windows = []
        for index, encoding in enumerate(cut):
            if not encoding.ids:
                raise InvalidArgument(
                    f"texts[{index}] has no tokens (it is empty after normalisation)", field="texts"
                )
            each = [encoding, *encoding.overflowing]
            if len(each) > limit:
                raise InvalidArgument(
                    f"texts[{index}] needs {len(each)} windows of {self.windows.window} tokens; the model "
                    f"reads at most {limit} (max_windows): send a shorter text or split it",
                    field="texts",
                )
            windows.append(each)
        return windows, whole

    def _make_uncut(self) -> Tokenizer:
        """The tokenizer without truncation, for the whole text's tokens in the reply and the
        windows cut from them."""
        uncut = Tokenizer.from_str(self._tokenizer.to_str())
        uncut.no_truncation()
        self._uncut = uncut
        return uncut
