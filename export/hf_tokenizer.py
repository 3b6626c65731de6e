"""An imported model's tokenizer as transformers runs it, written as the bundle's tokenizer.json.

``AutoTokenizer`` reads the folder the way the model's users do: its tokenizer.json with
tokenizer_config.json's settings applied, or, where the folder has only the slow files
(vocab.txt, vocab.json and merges.txt, a SentencePiece model), converted by transformers'
own converters. Its ``tokenizers`` backend is what the bundle ships, without the padding and
truncation settings the server sets per call. ``prove_tokenizer`` then checks that the
shipped file, read as the server reads it, gives transformers' ids text for text, so nothing
transformers does outside that file (or a converter's mistake) can go unnoticed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from attnserve.export.errors import ExportError, ExportRequestError
from attnserve.export.evalset import encode_one
from attnserve.service.bundle import Truncation

# tokenizer_config.json's model_max_length when the tokenizer sets no limit (int(1e30)).
NO_LIMIT = 1_000_000


@dataclass(frozen=True)
class ImportedTokenizer:
    path: Path  # the written tokenizer.json
    pad_id: int
    truncation: Truncation  # the end of a long text transformers keeps
    max_length: int | None  # tokenizer_config.json's model_max_length; None: no limit set
    has_unk: bool  # whether it has [UNK], the unknown token the server counts
    transformers_tokenizer: Any  # what the ids are proven against


def write_tokenizer(folder: Path, target: Path, vocab_size: int, config_pad: int | None) -> ImportedTokenizer:
    """Write the folder's tokenizer (as transformers loads it) to ``target``; ExportRequestError
    when transformers cannot load it or it does not fit a model of ``vocab_size`` rows."""
    from transformers import AutoTokenizer

    try:
        loaded = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError, TypeError, KeyError, ImportError, RuntimeError) as exc:
        raise ExportRequestError(
            f"{folder}: transformers cannot read the tokenizer: {type(exc).__name__}: "
            f"{' '.join(str(exc).split())}"
        ) from exc
    backend = getattr(loaded, "backend_tokenizer", None)
    if not isinstance(backend, Tokenizer):
        raise ExportRequestError(
            f"{folder}: transformers reads its tokenizer as {type(loaded).__name__}, which has no "
            "tokenizers backend to ship; the server needs a tokenizer.json"
        )
    shipped = Tokenizer.from_str(backend.to_str())  # a copy: transformers' own stays as it was
    shipped.no_padding()  # both are set by the server per call (max_len, the manifest's side)
    shipped.no_truncation()
    size = shipped.get_vocab_size(with_added_tokens=True)
    if size > vocab_size:
        raise ExportRequestError(
            f"{folder}: the tokenizer has {size:,} tokens but the model's embedding table only "
            f"{vocab_size:,} rows: the tokenizer belongs to another model"
        )
    pad_id = loaded.pad_token_id if loaded.pad_token_id is not None else config_pad
    if not isinstance(pad_id, int) or not 0 <= pad_id < vocab_size:
        raise ExportRequestError(
            f"{folder}: the tokenizer has no padding token, and config.json no pad_token_id"
        )
    target.write_text(shipped.to_str(), encoding="utf-8")
    limit = loaded.model_max_length
    return ImportedTokenizer(
        path=target,
        pad_id=int(pad_id),
        truncation="tail" if loaded.truncation_side == "left" else "head",
        max_length=int(limit) if isinstance(limit, int | float) and limit < NO_LIMIT else None,
        has_unk=shipped.token_to_id("[UNK]") is not None,
        transformers_tokenizer=loaded,
    )


def prove_tokenizer(tokenizer: ImportedTokenizer, texts: list[str], max_len: int) -> None:
    """ExportError unless the shipped file gives transformers' ids for every text, cut to
    ``max_len`` tokens on the same side."""
    expected = tokenizer.transformers_tokenizer(texts, truncation=True, max_length=max_len)["input_ids"]
    for text, ids in zip(texts, expected, strict=True):
        shipped, _ = encode_one(tokenizer.path, text, max_len, tokenizer.truncation)  # [1, T]
        if shipped[0].tolist() != list(ids):
            raise ExportError(
                f"tokenizer.json encodes {text[:60]!r} as {shipped[0].tolist()[:16]}, transformers' "
                f"tokenizer as {list(ids)[:16]}: the shipped file would not tokenize as the model expects"
            )
