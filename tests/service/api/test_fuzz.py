"""Property tests over request fields of every API (hypothesis), against a real server: the
two gRPC APIs, and on the HTTP port the JSON API and V2 REST.

Whatever the fields hold, the status is one of the allowed codes (never UNKNOWN or
INTERNAL), and a refusal names the field it is about, gives the limit as a number when it
is about a limit, and leaks no path, traceback or class name (text the caller sent and the
server quotes back is taken out before looking).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from attnserve.service.api.http.errors import HTTP_STATUS
from attnserve.service.api.v2.tensors import encode_bytes
from attnserve.service.errors import Status
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from attnserve.service.proto.inference import grpc_service_pb2 as v2pb
from tests.support.fuzzing import (
    NATIVE_FIELDS,
    SEEN,
    SETTINGS,
    V2_FIELDS,
    call,
    check,
    hostile_text,
    number_texts,
)
from tests.support.http import call as http_call
from tests.support.load import record_figures
from tests.support.methods import ALLOWED, CLASSIFY, MODEL_INFER
from tests.support.servers import RunningServer, free_port, make_settings

# Each one_of branch is equally likely: most names, versions and texts are valid, so most
# requests get past model resolution and tokenization to the checks of their other fields.
names = st.one_of(
    st.just("car"),
    st.just("pool"),
    st.just("bow"),
    st.just("car"),
    st.sampled_from(["", "CAR", "car/../pool", "car\x00"]),
    st.text(max_size=80),
)
texts = st.one_of(
    st.sampled_from(["the white car is on the left", "a black car", "left of the car"]),
    st.sampled_from(["the white car is on the left", "a black car", "left of the car"]).map(
        lambda t: t + "\x00🚗"
    ),
    st.text(max_size=120),
    st.sampled_from([" ", "\x00", "🚗", "x" * 10_001, "car " * 60]),
)
# JSON may carry what protobuf cannot (lone surrogates): the HTTP strategies add it.
rest_texts = st.one_of(texts, hostile_text)


@pytest.fixture(scope="module")
def fuzz_server(model_repository: Path) -> Iterator[RunningServer]:
    settings = make_settings(model_repository, max_texts_per_request=16, http_port=free_port())
    with RunningServer(settings) as running:
        yield running
    record_figures("fuzzed requests (hypothesis), by status", **dict(sorted(SEEN.items())))


@SETTINGS
@given(
    model=names,
    version=st.one_of(st.just(0), st.just(0), st.just(1), st.integers(-(2**63), 2**63 - 1)),
    items=st.one_of(st.lists(texts, min_size=1, max_size=3), st.lists(texts, max_size=20)),
    attention=st.one_of(st.integers(0, 2), st.integers(0, 6), st.integers(-(2**31), 2**31 - 1)),
    top_k=st.one_of(st.just(0), st.just(0), st.integers(0, 8), st.integers(0, 2**32 - 1)),
    request_id=st.text(max_size=40),
)
def test_native_requests_get_allowed_statuses_and_clean_messages(
    fuzz_server: RunningServer,
    model_repository: Path,
    model: str,
    version: int,
    items: list[str],
    attention: int,
    top_k: int,
    request_id: str,
) -> None:
    request = pb.ClassifyRequest(
        model=model, version=version, texts=items, top_k=top_k, request_id=request_id
    )
    request.attention = cast(pb.AttentionMode, attention)  # unknown enum values travel as ints
    code, message = call(fuzz_server.target, CLASSIFY, request.SerializeToString())
    check(code, message, NATIVE_FIELDS, [model, request_id, str(version)], model_repository)


tensor_names = st.one_of(st.sampled_from(["TEXT", "INPUT_IDS", "ATTENTION_MASK"]), st.text(max_size=20))
datatypes = st.one_of(st.sampled_from(["BYTES", "INT64", "FP32", "INT32", ""]), st.text(max_size=8))
Tensor = tuple[str, str, list[int], bytes]


def _int64(values: list[int]) -> bytes:
    return b"".join(v.to_bytes(8, "little", signed=True) for v in values)


@st.composite
def text_tensors(draw: st.DrawFn) -> list[Tensor]:
    """A TEXT tensor, its shape and data usually in agreement."""
    items = draw(st.lists(texts, max_size=20))
    shape = draw(st.one_of(st.just([len(items), 1]), st.lists(st.integers(-2, 24), max_size=3)))
    return [("TEXT", "BYTES", shape, encode_bytes([t.encode("utf-8", "surrogatepass") for t in items]))]


@st.composite
def id_tensors(draw: st.DrawFn) -> list[Tensor]:
    """INPUT_IDS + ATTENTION_MASK, often well-formed, with ids that may leave the vocabulary."""
    rows, width = draw(st.integers(0, 4)), draw(st.integers(0, 60))
    ids = draw(st.lists(st.integers(-3, 400), min_size=rows * width, max_size=rows * width))
    lengths = draw(st.lists(st.integers(0, width), min_size=rows, max_size=rows))
    mask = [int(col < n) for n in lengths for col in range(width)]
    if draw(st.booleans()):
        mask = draw(st.lists(st.integers(0, 1), min_size=len(mask), max_size=len(mask)))
    return [
        ("INPUT_IDS", "INT64", [rows, width], _int64(ids)),
        ("ATTENTION_MASK", draw(st.sampled_from(["INT64", "INT32"])), [rows, width], _int64(mask)),
    ]


any_tensors = st.lists(
    st.tuples(tensor_names, datatypes, st.lists(st.integers(-2, 24), max_size=3), st.binary(max_size=200)),
    max_size=3,
)


@SETTINGS
@given(
    model=names,
    version=st.one_of(
        st.just(""),
        st.just(""),
        st.just("1"),
        st.sampled_from(["2", "0", "-1", "01", "9" * 20]),
        st.text(max_size=10),
    ),
    tensors=st.one_of(text_tensors(), id_tensors(), any_tensors),
    typed=st.booleans(),
    outputs=st.lists(
        st.one_of(st.sampled_from(["LOGITS", "LABEL", "ATTENTION", "LENGTHS"]), st.text(max_size=10)),
        max_size=3,
    ),
)
def test_v2_requests_get_allowed_statuses_and_clean_messages(
    fuzz_server: RunningServer,
    model_repository: Path,
    model: str,
    version: str,
    tensors: list[Tensor],
    typed: bool,
    outputs: list[str],
) -> None:
    request = v2pb.ModelInferRequest(model_name=model, model_version=version)
    for name, datatype, shape, data in tensors:
        tensor = request.inputs.add(name=name, datatype=datatype, shape=[max(d, 0) for d in shape])
        if typed:  # typed contents instead of raw bytes
            tensor.contents.bytes_contents.append(data)
            tensor.contents.int64_contents.extend(range(len(data) % 5))
        else:
            request.raw_input_contents.append(data)
    for name in outputs:
        request.outputs.add(name=name)
    code, message = call(fuzz_server.target, MODEL_INFER, request.SerializeToString())
    sent = [model, version, *outputs, *(name for name, *_ in tensors), *(dt for _, dt, *_ in tensors)]
    check(code, message, V2_FIELDS, sent, model_repository)


# --- the HTTP port ----------------------------------------------------------------------------
HTTP_FIELDS = (*NATIVE_FIELDS, "request_id", "no such route", "timeout")
V2_REST_FIELDS = (
    *V2_FIELDS,
    "inputs",
    "outputs",
    "parameters",
    "id",
    "Inference-Header-Content-Length",
    "no such route",
)
# Request field names the strategies use as keys: what the server names, not what it quotes back.
KEYS = {
    "texts",
    "attention",
    "top_k",
    "version",
    "request_id",
    "inputs",
    "outputs",
    "name",
    "datatype",
    "shape",
}
KEYS |= {"data", "parameters", "binary_data_size", "binary_data", "binary_data_output", "id"}
ALLOWED_HTTP = {HTTP_STATUS[Status[code]] if code != "OK" else 200 for code in ALLOWED} | {404, 405, 413}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | hostile_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def _http(port: int, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, object]:
    reply = http_call(port, "POST", path, body, headers)
    assert reply.headers["content-type"] == "application/json", reply.body[:200]
    return reply.status, reply.json()


@SETTINGS
@given(
    model=names,
    document=st.one_of(
        st.fixed_dictionaries(
            {
                "texts": st.one_of(
                    st.lists(rest_texts, min_size=1, max_size=3), st.lists(rest_texts, max_size=20)
                )
            },
            optional={
                "attention": st.one_of(
                    st.sampled_from(["none", "pooled", "all", "rollout", "last_layer"]), json_values
                ),
                "top_k": st.one_of(st.integers(0, 8), st.integers(-(2**40), 2**40), json_values),
                "version": st.one_of(st.just(0), st.just(1), st.integers(-(2**63), 2**63), json_values),
                "request_id": st.one_of(st.text(max_size=40), json_values),
            },
        ),
        st.dictionaries(
            st.sampled_from(["texts", "attention", "top_k", "version", "x"]), json_values, max_size=4
        ),
        json_values,
    ),
    garbage=st.one_of(st.none(), st.none(), st.binary(max_size=60)),
)
def test_json_api_requests_get_allowed_statuses_and_clean_messages(
    fuzz_server: RunningServer, model_repository: Path, model: str, document: object, garbage: bytes | None
) -> None:
    port = fuzz_server.server.http_port  # type: ignore[union-attr]
    body = garbage if garbage is not None else json.dumps(document).encode()
    path = f"/v1/models/{urllib.parse.quote(model, safe='')}:classify"
    status, reply = _http(port, path, body)
    assert status in ALLOWED_HTTP, (status, reply)
    if status == 200:
        assert isinstance(reply, dict) and reply["results"]
        check("OK", "", HTTP_FIELDS, [], model_repository)
        return
    assert isinstance(reply, dict) and set(reply) == {"error"}
    error = reply["error"]
    assert HTTP_STATUS[Status[error["code"]]] == status or status in (404, 405, 413), (status, error)
    if status == 405:  # an empty name leaves /v1/models/:classify, a GET-only route
        assert error["code"] == "UNIMPLEMENTED" and not model, error
        return
    strings = [v for v in json.dumps(document).split('"') if v and v not in KEYS] if garbage is None else []
    check(error["code"], error["message"], HTTP_FIELDS, [model, *strings], model_repository)


@st.composite
def rest_documents(draw: st.DrawFn) -> tuple[dict[str, object], bytes]:
    """A V2 REST inference body: JSON tensors, or binary ones after the JSON, usually sensible."""
    items = draw(st.lists(rest_texts, max_size=6))
    shape = draw(st.one_of(st.just([len(items), 1]), st.lists(st.integers(-2, 24), max_size=3), json_values))
    tensor: dict[str, object] = {
        "name": draw(st.one_of(tensor_names, hostile_text)),
        "datatype": draw(st.one_of(datatypes, json_values)),
        "shape": shape,
    }
    binary = b""
    if draw(st.booleans()):
        tensor["data"] = draw(st.one_of(st.just(items), st.just([[t] for t in items]), json_values))
    else:
        binary = encode_bytes([t.encode("utf-8", "surrogatepass") for t in items])
        size = draw(st.one_of(st.just(len(binary)), st.integers(-2, 400), json_values))
        tensor["parameters"] = {"binary_data_size": size}
    document: dict[str, object] = {"inputs": draw(st.one_of(st.just([tensor]), json_values))}
    if draw(st.booleans()):
        outputs = st.lists(
            st.one_of(st.sampled_from(["LOGITS", "LABEL", "ATTENTION"]), hostile_text), max_size=3
        )
        document["outputs"] = [
            {"name": name, "parameters": {"binary_data": draw(st.one_of(st.booleans(), json_values))}}
            for name in draw(outputs)
        ]
    if draw(st.booleans()):
        document["id"] = draw(json_values)
    return document, binary


@SETTINGS
@given(
    model=names,
    version=st.one_of(st.just(""), st.just("1"), number_texts, st.text(max_size=10)),
    request=rest_documents(),
    # Printable ASCII: a header the HTTP framing itself refuses never reaches the application.
    header=st.one_of(
        st.just("exact"),
        st.just("exact"),
        st.just("none"),
        st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=12),
        number_texts.filter(lambda text: text.strip() == text and all(ord(c) < 256 for c in text)),
    ),
)
def test_v2_rest_requests_get_allowed_statuses_and_clean_messages(
    fuzz_server: RunningServer,
    model_repository: Path,
    model: str,
    version: str,
    request: tuple[dict[str, object], bytes],
    header: str,
) -> None:
    port = fuzz_server.server.http_port  # type: ignore[union-attr]
    document, binary = request
    head = json.dumps(document).encode()
    headers = {}
    if header == "exact":
        headers["Inference-Header-Content-Length"] = str(len(head))
    elif header != "none":
        headers["Inference-Header-Content-Length"] = header
    quoted = urllib.parse.quote(model, safe="")
    path = (
        f"/v2/models/{quoted}"
        + (f"/versions/{urllib.parse.quote(version, safe='')}" if version else "")
        + "/infer"
    )
    status, reply = _http(port, path, head + binary, headers)
    assert status in ALLOWED_HTTP, (status, reply)
    if status == 200:
        SEEN["OK"] += 1
        return
    assert isinstance(reply, dict) and set(reply) == {"error"} and isinstance(reply["error"], str)
    code = (
        next(s.name for s, http in HTTP_STATUS.items() if http == status)
        if status not in (404, 405, 413)
        else "NOT_FOUND"
    )
    strings = [v for v in head.decode().split('"') if v and v not in KEYS]
    check(
        code if code in ALLOWED else "INVALID_ARGUMENT",
        reply["error"],
        V2_REST_FIELDS,
        [model, version, header, *strings],
        model_repository,
    )


VERSIONED_GETS = (
    "/v1/models/{model}?version={version}",
    "/v2/models/{model}/versions/{version}",
    "/v2/models/{model}/versions/{version}/config",
    "/v2/models/{model}/versions/{version}/stats",
    "/v2/models/{model}/versions/{version}/ready",
)


@SETTINGS
@given(
    model=st.sampled_from(["car", "pool", "ghost"]),
    version=number_texts,
    route=st.sampled_from(VERSIONED_GETS),
)
def test_versions_in_urls_are_ascii_numbers_on_every_route(
    fuzz_server: RunningServer, model_repository: Path, model: str, version: str, route: str
) -> None:
    assume(version or route.startswith("/v1"))  # ".../versions//..." is no route at all
    port = fuzz_server.server.http_port  # type: ignore[union-attr]
    path = route.format(model=model, version=urllib.parse.quote(version, safe=""))
    reply = http_call(port, "GET", path)
    plain = version.isascii() and version.isdigit() and len(version) < 20 and int(version) <= 2**63 - 1
    number = version in ("", "0") or (plain and version[0] != "0")
    if route.endswith("/ready"):  # the protocol's readiness: 200 or 400, no body
        assert reply.status in (200, 400), (path, reply.status)
        assert reply.status == 400 or (number and model != "ghost" and version in ("", "0", "1"))
        SEEN["OK" if reply.status == 200 else "INVALID_ARGUMENT"] += 1
        return
    assert reply.status in (200, 400, 404), (path, reply.status, reply.body[:200])
    if not number:
        assert reply.status == 400, (path, reply.body[:200])
    document = reply.json()
    if reply.status == 200:
        SEEN["OK"] += 1
        return
    message = document["error"]["message"] if route.startswith("/v1") else document["error"]
    code = "INVALID_ARGUMENT" if reply.status == 400 else "NOT_FOUND"
    assert len(message) < 400, message
    check(code, message, (*V2_FIELDS, "version"), [model, version], model_repository)
