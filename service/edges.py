"""Values from a client, parsed once at the edge, the same way on every route and transport.

Integers that arrive as text (versions, lengths) are ASCII decimal digits of bounded length:
`str.isdigit` also accepts "²" (which `int` refuses) and "١" or "１" (which `int` reads as
1), and `int` on a 5,000-digit string is quadratic work. Strings are checked for valid
Unicode before they reach the tokenizer or protobuf, both of which raise on a lone
surrogate. A JSON body's parse error names where it failed. A refusal is `InvalidArgument`
naming the field, quoting at most a short prefix of what was sent, so a message stays
small whatever the input.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Sequence
from typing import TypeVar

from attnserve.service.common.vocabulary import AttentionMode, Attribution
from attnserve.service.errors import InvalidArgument, ServiceError
from attnserve.service.settings import LongText

MAX_VERSION = 2**63 - 1  # what the native API's int64 version field carries
QUOTE_LIMIT = 32
_DIGITS = frozenset("0123456789")


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """A short, printable prefix of client input for an error message.

    Strings and bytes are cut to `limit` characters before `repr` (which escapes lone
    surrogates, controls and direction overrides), so the result is ASCII-safe UTF-8 and at
    most about `limit * 10` characters; other values are described without building their
    full `repr` (a list of 100,000 dimensions, an integer of 5,000 digits)."""
    if isinstance(value, str | bytes):
        cut = value[:limit]
        return repr(cut) + ("..." if len(value) > limit else "")
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() <= 64:
            return repr(value)
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, list | tuple):  # a shape: its first dimensions and how many there are
        head = ", ".join(quote(item, limit) for item in value[:8])
        more = f", ... ({len(value)} items)" if len(value) > 8 else ""
        return f"[{head}{more}]"[: limit * 8]
    return f"a value of type {type(value).__name__}"


def parse_uint(text: str, *, field: str, maximum: int) -> int:
    """`text` as a non-negative integer of ASCII digits, at most `maximum`."""
    if not text or len(text) > len(str(maximum)) or not _DIGITS.issuperset(text) or int(text) > maximum:
        raise InvalidArgument(
            f"{field}: {quote(text)} is not a whole number of ASCII digits 0-9 up to the limit of {maximum}"
        )
    return int(text)


def parse_version(text: str, *, field: str = "version") -> int:
    """A model version given as text: "" or "0" is the latest served, else 1 .. 2^63-1.

    Digits only, without sign, spaces or a leading zero ("01" is not a version)."""
    if text in ("", "0"):
        return 0
    if text[0] == "0" or len(text) > len(str(MAX_VERSION)) or not _DIGITS.issuperset(text):
        raise _not_version(text, field)
    value = int(text)
    if value > MAX_VERSION:
        raise _not_version(text, field)
    return value


def _not_version(text: str, field: str) -> InvalidArgument:
    return InvalidArgument(
        f"{field}: {quote(text)} is not a version number (0 or empty: the latest; else 1, 2, ... "
        f"up to the limit of {MAX_VERSION})"
    )


def check_text(value: str, *, field: str) -> str:
    """`value` unchanged when it is valid Unicode (encodable as UTF-8), else InvalidArgument.

    Callers test `value.isascii()` first (ASCII is valid), so an ASCII value costs no call."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            f"{field}: character {exc.start} is not valid Unicode "
            f"({quote(value[exc.start : exc.start + 1])}, a lone surrogate)"
        ) from None
    return value


def check_texts(values: Sequence[str], *, field: str) -> None:
    """`check_text` on every element, naming the element (`texts[3]`)."""
    for index, value in enumerate(values):
        if not value.isascii():
            check_text(value, field=f"{field}[{index}]")


def inflate(data: bytes, encoding: str, *, limit: int, too_large: Callable[[int], ServiceError]) -> bytes:
    """A request body decoded per its `Content-Encoding` (identity, gzip or deflate).

    Bounded: a small body may not expand past `limit` bytes (`too_large(limit)` is raised).
    Strict: a truncated stream, or any byte after the end of the compressed stream (a second
    gzip member included), is refused rather than silently ignored."""
    name = encoding.strip().lower()
    if name in ("", "identity"):
        return data
    if name not in ("gzip", "deflate"):
        raise InvalidArgument(f"Content-Encoding: {quote(name)} is not supported (gzip, deflate)")
    inflater = zlib.decompressobj(wbits=31 if name == "gzip" else 15)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error:
        raise InvalidArgument(f"request body: not valid {name} data") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise too_large(limit)
    if not inflater.eof:
        raise InvalidArgument(f"request body: truncated {name} data")
    if inflater.unused_data:
        raise InvalidArgument(
            f"request body: {len(inflater.unused_data)} bytes after the end of the {name} data"
        )
    return out


def parse_json(data: bytes) -> object:
    try:
        return json.loads(data)
    except RecursionError:
        raise InvalidArgument("request body: JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError for bytes that are not UTF-8
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise InvalidArgument(f"request body: not valid JSON{where}") from None


Spelled = TypeVar("Spelled", AttentionMode, Attribution)


def parse_word(kind: type[Spelled], value: object, *, field: str) -> Spelled:
    """A mode or method from its word or proto name, as the vocabulary reads it (`parse`, the
    one reading of a word); its refusal, which names the words, as InvalidArgument naming
    the field."""
    try:
        return kind.parse(value)
    except ValueError as exc:
        raise InvalidArgument(f"{field}: {exc}") from None


def parse_number(kind: type[Spelled], value: int, *, field: str) -> Spelled:
    """A mode or method from its attnserve.v1 number (0: unset, NONE)."""
    try:
        return kind.of_number(value)
    except ValueError as exc:
        known = ", ".join(member.proto_name for member in kind)
        raise InvalidArgument(f"{field}: {exc}; known: {known}") from None


# A native request's numbers, read with one look-up each on every call.
_MODES, _METHODS = AttentionMode.numbered(), Attribution.numbered()


def parse_numbers(attention: int, attribution: int) -> tuple[AttentionMode, Attribution]:
    """A native request's `attention` and `attribution` from their attnserve.v1 numbers (0:
    unset, NONE); a number of no member is refused as `parse_number` refuses it."""
    mode, method = _MODES.get(attention), _METHODS.get(attribution)
    if mode is None or method is None:
        return (
            parse_number(AttentionMode, attention, field="attention"),
            parse_number(Attribution, attribution, field="attribution"),
        )
    return mode, method


LONG_TEXTS = ("truncate", "reject", "windows")


def parse_long_text(value: object, *, field: str = "long_text") -> LongText | None:
    """A request's choice for texts over max_len; "" (or absent) leaves it to the server."""
    if value is None or value == "":
        return None
    if value == "truncate" or value == "reject" or value == "windows":
        return value
    raise InvalidArgument(
        f"{field}: {quote(value)} is not one of {', '.join(LONG_TEXTS)} (or empty)", field=field
    )
