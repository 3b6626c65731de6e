"""Hostile input classes that escaped the mapping once: version strings `str.isdigit` accepts
but are no ASCII number, huge integers, shapes whose element count overflows int64, and
large bodies in volume. Every V2 method that takes a version is tried; the server log must
stay free of tracebacks (nothing reached the INTERNAL fallback). One server serves the
car-order transformer and the tiny BERT of 512 positions (word pieces); each test runs
against both."""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from attnserve.service.api.v2.tensors import encode_bytes
from attnserve.service.edges import MAX_VERSION
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from attnserve.service.proto.inference import grpc_service_pb2 as v2pb
from tests.service.encoder_bundles import with_encoder
from tests.support.fuzzing import NATIVE_FIELDS, SETTINGS, V2_FIELDS, ErrorLog, call, check
from tests.support.load import record_figures
from tests.support.methods import CLASSIFY, MODEL_INFER
from tests.support.servers import RunningServer, make_settings

V2 = "/inference.GRPCInferenceService/"
MODELS = ("car", "bert")
VERSIONED: dict[str, Callable[[str, str], Message]] = {
    "ModelInfer": lambda m, v: _text_infer(m, v),
    "ModelMetadata": lambda m, v: v2pb.ModelMetadataRequest(name=m, version=v),
    "ModelConfig": lambda m, v: v2pb.ModelConfigRequest(name=m, version=v),
    "ModelStatistics": lambda m, v: v2pb.ModelStatisticsRequest(name=m, version=v),
    "ModelReady": lambda m, v: v2pb.ModelReadyRequest(name=m, version=v),
}
versions = st.one_of(
    st.sampled_from(["²", "¹", "١", "१", "٣", "０", "01", "00", "0", "-1", "+1", " 1", "1 ", "1.0", "1_0"]),
    st.integers(0, 10**40).map(str),
    st.sampled_from(["9" * 5000, str(MAX_VERSION), str(MAX_VERSION + 1)]),
    st.text(alphabet=st.characters(categories=["Nd", "No"]), min_size=1, max_size=6),
)
BIG = 2**63 - 1
dims = st.one_of(st.integers(0, 64), st.sampled_from([2**31, 2**32, 2**62, BIG]), st.integers(0, BIG))


@pytest.fixture(scope="module")
def served(model_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return with_encoder(model_repository, tmp_path_factory)


@pytest.fixture(scope="module")
def hostile(served: Path) -> Iterator[tuple[RunningServer, ErrorLog]]:
    errors = ErrorLog()
    logging.getLogger().addHandler(errors)
    try:
        with RunningServer(make_settings(served, max_texts_per_request=16)) as running:
            yield running, errors
    finally:
        logging.getLogger().removeHandler(errors)


def _text_infer(model: str, version: str) -> v2pb.ModelInferRequest:
    request = v2pb.ModelInferRequest(model_name=model, model_version=version)
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1])
    request.raw_input_contents.append(encode_bytes([b"the white car is left"]))
    return request


def _is_version(value: str) -> bool:
    """ASCII digits without a leading zero, or "0" (the latest, as "" is), up to MAX_VERSION."""
    if value == "0":
        return True
    plain = value.isascii() and value.isdigit() and value[0] != "0" and len(value) <= len(str(MAX_VERSION))
    return plain and int(value) <= MAX_VERSION


@pytest.mark.parametrize("model", MODELS)
@SETTINGS
@given(version=versions)
def test_v2_versions_are_ascii_numbers_on_every_method(
    hostile: tuple[RunningServer, ErrorLog], served: Path, model: str, version: str
) -> None:
    server, errors = hostile
    with grpc.insecure_channel(server.target) as channel:
        for method, build in VERSIONED.items():
            code, message = call(
                server.target, V2 + method, build(model, version).SerializeToString(), channel=channel
            )
            check(code, message, V2_FIELDS, [version], served)
            if version == "":
                continue
            if _is_version(version):  # each model has version 1 only
                assert code in {"OK", "NOT_FOUND"}, (method, version, code, message)
                assert code == "OK" or version != "1", (method, message)
            else:
                assert code == "INVALID_ARGUMENT" and "model_version" in message, (method, version, message)
        replies = channel.stream_stream(
            V2 + "ModelStreamInfer", request_serializer=None, response_deserializer=None
        )(iter([_text_infer(model, version).SerializeToString()]), timeout=30)
        [reply] = [v2pb.ModelStreamInferResponse.FromString(raw) for raw in replies]
    if not _is_version(version):
        assert reply.error_message.startswith("INVALID_ARGUMENT: model_version"), reply.error_message
    assert not errors.messages, errors.messages


@pytest.mark.parametrize("model", MODELS)
@SETTINGS
@given(
    shape=st.lists(dims, min_size=1, max_size=3),
    data=st.sampled_from([b"", b"\x01" * 8, b"\x00" * 64]),
    typed=st.booleans(),
)
def test_int64_shapes_that_overflow_are_refused_before_allocation(
    hostile: tuple[RunningServer, ErrorLog],
    served: Path,
    model: str,
    shape: list[int],
    data: bytes,
    typed: bool,
) -> None:
    server, errors = hostile
    request = v2pb.ModelInferRequest(model_name=model)
    for name in ("INPUT_IDS", "ATTENTION_MASK"):
        tensor = request.inputs.add(name=name, datatype="INT64", shape=shape)
        if typed:
            tensor.contents.int64_contents.extend([1] * (len(data) // 8))
        else:
            request.raw_input_contents.append(data)
    code, message = call(server.target, MODEL_INFER, request.SerializeToString())
    check(code, message, V2_FIELDS, [], served)
    assert code in {"INVALID_ARGUMENT", "OK"}, (shape, code, message)
    assert not re.search(r"(needs|has|holds) -\d", message), message  # no wrapped-around count
    assert not errors.messages, errors.messages


def _large_bodies(model: str, count: int) -> Iterator[tuple[str, bytes, tuple[str, ...]]]:
    """(method, body, fields) of 1 to 4 MB: garbage, long texts, huge INPUT_IDS, huge tensors."""
    for index in range(count):
        kind = index % 5
        size = 1_000_000 + (index * 613_007) % 3_000_000
        if kind == 0:
            yield CLASSIFY, os.urandom(size), NATIVE_FIELDS
        elif kind == 1:
            texts = ["car " * 15_000] * max(1, size // 60_000)
            yield CLASSIFY, pb.ClassifyRequest(model=model, texts=texts).SerializeToString(), NATIVE_FIELDS
        elif kind == 2:
            rows = size // 32  # 100,000 rows and more of 4 ids
            request = v2pb.ModelInferRequest(model_name=model)
            for name in ("INPUT_IDS", "ATTENTION_MASK"):
                request.inputs.add(name=name, datatype="INT64", shape=[rows, 2])
                request.raw_input_contents.append(b"\x01" * (rows * 16))
            yield MODEL_INFER, request.SerializeToString(), V2_FIELDS
        elif kind == 3:
            request = v2pb.ModelInferRequest(model_name=model)
            request.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1])
            request.raw_input_contents.append(encode_bytes([b"x" * size]))
            yield MODEL_INFER, request.SerializeToString(), V2_FIELDS
        else:
            yield MODEL_INFER, os.urandom(size), V2_FIELDS


@pytest.mark.parametrize("model", MODELS)
def test_large_bodies_in_volume_are_refused_and_the_server_keeps_serving(
    hostile: tuple[RunningServer, ErrorLog], served: Path, model: str
) -> None:
    server, errors = hostile
    seen: Counter[str] = Counter()
    with grpc.insecure_channel(server.target) as channel, ThreadPoolExecutor(8) as pool:
        futures = [
            (pool.submit(call, server.target, method, body, channel=channel), fields)
            for method, body, fields in _large_bodies(model, 150)
        ]
        for future, fields in futures:
            code, message = future.result()
            seen[code] += 1
            check(code, message, fields, [], served)
            assert code in {"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"}, (code, message)
        code, _ = call(
            server.target, CLASSIFY, pb.ClassifyRequest(model=model, texts=["a car"]).SerializeToString()
        )
    assert code == "OK"
    assert not errors.messages, errors.messages
    record_figures(
        f"large bodies in volume (150 of 1-4 MB, 8 concurrent, {model})", **dict(sorted(seen.items()))
    )
