"""What every fuzzed request must satisfy (tests/service/api/test_fuzz*.py): an allowed
status, and a refusal that names its field, gives a limit as a number and leaks no path,
traceback or class name (text the caller sent and the server quotes back is taken out
before looking)."""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path

import grpc
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.support.methods import ALLOWED

LEAK = re.compile(
    r"Traceback|File \"|\.py\b|/work/|/tmp/|/home/|\b[A-Z]\w*(Error|Exception)\b|0x[0-9a-f]{6,}"
)
LIMIT = re.compile(r"\blimit\b|\bat most\b|\bmax(imum)?\b|larger than")
NATIVE_FIELDS = ("texts", "model", "version", "attention", "top_k", "request body", "queue")
V2_FIELDS = ("input ", "output ", "raw_input_contents", "model", "version", "name", "request body", "queue")
SETTINGS = settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))

# What hypothesis' text() never makes, and what once passed `str.isdigit` or reached the
# tokenizer and protobuf: lone UTF-16 surrogates, digits that are not ASCII, direction overrides.
SURROGATES = ["\ud800", "a\udfffb", "\udc80\ud800", "car\ud83d"]
NOT_ASCII_DIGITS = ["²", "¹", "١", "१", "１", "０", "٣"]
hostile_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from([*SURROGATES, "\u202ecar", "\x00", "\ufeff"]),
    st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3),
    st.text(st.characters(categories=["Nd", "No"]), min_size=1, max_size=6),
)
# Versions and lengths as a client may spell them in a URL or a header.
number_texts = st.one_of(
    st.sampled_from(["", "0", "1", "01", "00", "+1", "-1", " 1", "1 ", "1.0", "1e3", "0x1"]),
    st.sampled_from([*NOT_ASCII_DIGITS, "9" * 5000, str(2**63 - 1), str(2**63)]),
    st.integers(0, 10**30).map(str),
    st.text(st.characters(categories=["Nd", "No"]), min_size=1, max_size=6),
)
SEEN: Counter[str] = Counter()


def call(target: str, method: str, body: bytes, *, channel: grpc.Channel | None = None) -> tuple[str, str]:
    """One raw call; (status name, details)."""
    if channel is None:
        with grpc.insecure_channel(target) as own:
            return call(target, method, body, channel=own)
    try:
        channel.unary_unary(method, request_serializer=None, response_deserializer=None)(body, timeout=30)
    except grpc.RpcError as exc:
        return exc.code().name, exc.details() or ""
    return "OK", ""


def check(code: str, message: str, fields: tuple[str, ...], sent: list[str], repository: Path) -> None:
    SEEN[code] += 1
    assert code in ALLOWED, (code, message)
    if code == "OK":
        return
    assert message, code
    scrubbed = quoted_scrubbed = message
    quoted = {s[:n] for s in sent if len(s) >= 3 and not s.isdigit() for n in (32, 64, len(s))}
    for value in sorted(quoted, key=len, reverse=True):
        quoted_scrubbed = quoted_scrubbed.replace(repr(value), "<sent>")
        scrubbed = scrubbed.replace(repr(value), "<sent>").replace(value, "<sent>")
    assert str(repository) not in message
    assert not LEAK.search(scrubbed), message
    # The field must be named by the server, not only inside a value the caller sent; bare
    # replacement would also cut a short sent value ("Inf") out of a field name.
    assert any(field in quoted_scrubbed for field in fields) or "larger than max" in scrubbed, message
    if LIMIT.search(scrubbed):
        assert re.search(r"\d", scrubbed), message


class ErrorLog(logging.Handler):
    """Collects the ERROR records (tracebacks of unexpected failures included) of a server
    running in the test process; attach it to the root logger."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(self.format(record)[:300])
