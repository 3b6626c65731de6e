"""Property tests over request fields of both APIs (hypothesis), against a real server.

Whatever the fields hold, the status is one of the allowed codes (never UNKNOWN or
INTERNAL), and a refusal names the field it is about, gives the limit as a number when it
is about a limit, and leaks no path, traceback or class name (text the caller sent and the
server quotes back is taken out before looking).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnserve.service.api.v2.codec import encode_bytes
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from attnserve.service.proto.inference import grpc_service_pb2 as v2pb
from tests.support.fuzzing import NATIVE_FIELDS, SEEN, SETTINGS, V2_FIELDS, call, check
from tests.support.load import record_figures
from tests.support.methods import CLASSIFY, MODEL_INFER
from tests.support.servers import RunningServer, make_settings

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


@pytest.fixture(scope="module")
def fuzz_server(model_repository: Path) -> Iterator[RunningServer]:
    with RunningServer(make_settings(model_repository, max_texts_per_request=16)) as running:
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
    request.attention = attention  # type: ignore[assignment]  # unknown enum values travel as ints
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
