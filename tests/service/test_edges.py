"""The edge parsers: integers in text, versions, Unicode checks, quoting, bounded inflation."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnserve.service.common.vocabulary import AttentionMode, Attribution
from attnserve.service.edges import (
    MAX_VERSION,
    check_text,
    check_texts,
    inflate,
    parse_number,
    parse_numbers,
    parse_uint,
    parse_version,
    parse_word,
    quote,
)
from attnserve.service.errors import InvalidArgument, ResourceExhausted, ServiceError, Status

QUICK = settings(max_examples=300, deadline=None, database=None)
NOT_ASCII_DIGITS = ["²", "¹", "١", "१", "１", "０", "٣", "߀"]


def _refusal(call: object) -> InvalidArgument:
    assert callable(call)
    with pytest.raises(InvalidArgument) as caught:
        call()
    error = caught.value
    assert error.code is Status.INVALID_ARGUMENT
    assert len(error.message) < 400, len(error.message)
    error.message.encode("utf-8")  # a message is always sendable as gRPC details
    return error


@pytest.mark.parametrize("text", [*NOT_ASCII_DIGITS, "", " 1", "1 ", "+1", "-1", "1.0", "1_0", "0x1", "1e3"])
def test_parse_uint_refuses_everything_but_ascii_digits(text: str) -> None:
    error = _refusal(lambda: parse_uint(text, field="Content-Length", maximum=1000))
    assert error.message.startswith("Content-Length: ")
    assert "1000" in error.message


def test_parse_uint_bounds_length_before_int() -> None:
    error = _refusal(lambda: parse_uint("9" * 5000, field="n", maximum=2**63 - 1))
    assert "9" * 40 not in error.message  # quotes at most a short prefix
    _refusal(lambda: parse_uint("1001", field="n", maximum=1000))
    assert parse_uint("1000", field="n", maximum=1000) == 1000
    assert parse_uint("0", field="n", maximum=1000) == 0
    assert parse_uint("007", field="n", maximum=1000) == 7


@given(st.integers(0, 2**70))
@QUICK
def test_parse_uint_round_trips_within_the_maximum(value: int) -> None:
    maximum = 2**63 - 1
    if value <= maximum:
        assert parse_uint(str(value), field="n", maximum=maximum) == value
    else:
        _refusal(lambda: parse_uint(str(value), field="n", maximum=maximum))


@given(st.text(max_size=40))
@QUICK
def test_parse_uint_agrees_with_a_strict_reading(text: str) -> None:
    strict = text != "" and all("0" <= c <= "9" for c in text) and len(text) <= 4 and int(text) <= 5000
    if strict:
        assert parse_uint(text, field="n", maximum=5000) == int(text)
    else:
        _refusal(lambda: parse_uint(text, field="n", maximum=5000))


def test_parse_version() -> None:
    assert parse_version("") == 0
    assert parse_version("0") == 0
    assert parse_version("12") == 12
    assert parse_version(str(MAX_VERSION)) == MAX_VERSION
    for text in [*NOT_ASCII_DIGITS, "01", "00", str(MAX_VERSION + 1), "9" * 5000, "1 ", "-1"]:
        error = _refusal(lambda text=text: parse_version(text, field="model_version"))
        assert error.message.startswith("model_version: "), error.message
    assert _refusal(lambda: parse_version("x")).message.startswith("version: ")


@given(st.text(alphabet=st.characters(categories=["Nd", "No"]), min_size=1, max_size=8))
@QUICK
def test_parse_version_reads_only_ascii_digits(text: str) -> None:
    ascii_number = all("0" <= c <= "9" for c in text) and (text == "0" or text[0] != "0")
    if ascii_number and int(text) <= MAX_VERSION:
        assert parse_version(text) == int(text)
    else:
        _refusal(lambda: parse_version(text))


def test_check_text_refuses_lone_surrogates_naming_the_field() -> None:
    assert check_text("the white car", field="texts[0]") == "the white car"
    assert check_text("café 🚗 مرحبا", field="texts[0]") == "café 🚗 مرحبا"
    error = _refusal(lambda: check_text("ab\ud800cd", field="inputs[0].name"))
    assert error.message.startswith("inputs[0].name: character 2 ")
    assert "\\ud800" in error.message
    error = _refusal(lambda: check_texts(["ok", "fine", "\udfff"], field="texts"))
    assert error.message.startswith("texts[2]: ")
    check_texts(["ok", "ünïcode"], field="texts")


@given(st.text(max_size=30))
@QUICK
def test_check_text_accepts_exactly_what_utf8_encodes(value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        _refusal(lambda: check_text(value, field="f"))
    else:
        assert check_text(value, field="f") is value


@given(st.one_of(st.text(), st.binary(), st.integers(), st.lists(st.integers(), max_size=50)))
@QUICK
def test_quote_is_short_and_encodable(value: object) -> None:
    quoted = quote(value)
    quoted.encode("utf-8")
    assert len(quoted) <= 32 * 10 + 3 or (isinstance(value, list) and len(quoted) <= 256)


def test_quote_large_values() -> None:
    assert quote("x" * 100) == repr("x" * 32) + "..."
    assert len(quote(10**5000)) < 40  # no 5,000-digit repr (Python refuses to build it anyway)
    assert "100000 items" in quote(list(range(100_000)))
    assert len(quote(list(range(100_000)))) <= 256
    assert quote([2, 3]) == "[2, 3]" and quote([1] * 8) == str([1] * 8)
    assert quote("\u202eevil") == repr("\u202eevil") and "\\u202e" in quote("\u202eevil")


def _too_large(limit: int) -> ServiceError:
    return ResourceExhausted(f"request body: larger than the limit of {limit} bytes")


def test_inflate() -> None:
    body = b'{"texts": ["the white car"]}'
    assert inflate(body, "", limit=100, too_large=_too_large) == body
    assert inflate(gzip.compress(body), "GZip ", limit=100, too_large=_too_large) == body
    assert inflate(zlib.compress(body), "deflate", limit=100, too_large=_too_large) == body
    error = _refusal(lambda: inflate(gzip.compress(body) + b"junk", "gzip", limit=100, too_large=_too_large))
    assert "4 bytes after the end of the gzip data" in error.message
    _refusal(lambda: inflate(gzip.compress(body) * 2, "gzip", limit=100, too_large=_too_large))
    _refusal(lambda: inflate(zlib.compress(body) + b"\0", "deflate", limit=100, too_large=_too_large))
    _refusal(lambda: inflate(gzip.compress(body)[:-3], "gzip", limit=100, too_large=_too_large))
    _refusal(lambda: inflate(b"not gzip", "gzip", limit=100, too_large=_too_large))
    _refusal(lambda: inflate(body, "br", limit=100, too_large=_too_large))
    with pytest.raises(ResourceExhausted):
        inflate(gzip.compress(b"x" * 10_000_000), "gzip", limit=1000, too_large=_too_large)


def test_parse_word_refuses_naming_the_field_and_the_words() -> None:
    assert parse_word(AttentionMode, "last-layer", field="attention") is AttentionMode.LAST_LAYER
    assert parse_word(Attribution, Attribution.SHAPLEY, field="attribution") is Attribution.SHAPLEY
    words = "use one of: none, pooled, last_layer, all, rollout"
    for value, shown in (("heads", "'heads' is not an attention mode"), (3, "3 is not a string")):
        error = _refusal(
            lambda value=value: parse_word(AttentionMode, value, field="parameters.attention_mode")
        )
        assert error.message == f"parameters.attention_mode: {shown}; {words}"
    assert len(_refusal(lambda: parse_word(Attribution, list(range(10**5)), field="a")).message) < 100


def test_parse_numbers_reads_both_numbers_as_parse_number_does() -> None:
    for attention in range(-1, 8):
        for attribution in range(-1, 6):
            try:
                expected: object = (
                    parse_number(AttentionMode, attention, field="attention"),
                    parse_number(Attribution, attribution, field="attribution"),
                )
            except InvalidArgument as exc:
                expected = exc.message
            try:
                read: object = parse_numbers(attention, attribution)
            except InvalidArgument as exc:
                read = exc.message
            assert read == expected, (attention, attribution)
    assert parse_numbers(0, 0) == (AttentionMode.NONE, Attribution.NONE)
    assert parse_numbers(5, 3) == (AttentionMode.ROLLOUT, Attribution.SHAPLEY)
    known = "ATTENTION_MODE_NONE, ATTENTION_MODE_POOLED, ATTENTION_MODE_LAST_LAYER, ATTENTION_MODE_ALL, "
    assert _refusal(lambda: parse_numbers(97, 0)).message == (
        f"attention: unknown attention mode 97; known: {known}ATTENTION_MODE_ROLLOUT"
    )
    assert _refusal(lambda: parse_numbers(2, 9)).message.startswith(
        "attribution: unknown attribution method 9;"
    )
