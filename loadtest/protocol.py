"""Requests on the wire: a `Call` as attnserve.v1 `Classify` or V2 `ModelInfer` bytes, and the
check of each reply.

Both protocols are spoken with raw bytes over a plain grpc channel (no stub), so the same
code serves the Locust users and the benchmark's asyncio load generator. `Prepared.expected`
is the status the server must answer: OK for a valid call, the documented error for a bad
one (and for an over-length text when the server rejects long texts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol as TypingProtocol
from typing import cast

from google.protobuf.message import DecodeError

from attnserve.service.api.v2.tensors import encode_bytes
from attnserve.service.client.messages import to_model_info
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as npb
from attnserve.service.proto.inference import grpc_service_pb2 as vpb
from kit.v2 import MODEL_INFER, text_request
from loadtest.workload import Call, ModelLimits

NATIVE_METHOD = "/attnserve.v1.Classifier/Classify"
GET_MODEL_METHOD = "/attnserve.v1.Classifier/GetModel"
UNKNOWN_MODEL = "no-such-model-for-load-test"


@dataclass(frozen=True)
class Prepared:
    body: bytes
    expected: str  # gRPC status name the server must answer


class WireProtocol(TypingProtocol):
    api: str  # the server's metrics label: native | v2
    method: str
    bad_kinds: tuple[str, ...]

    def prepare(self, call: Call) -> Prepared: ...

    def check(self, call: Call, reply: bytes) -> str | None:
        """None when an OK reply is right for `call`; otherwise what is wrong with it."""
        ...


def _expected(call: Call, limits: ModelLimits) -> str:
    return "INVALID_ARGUMENT" if call.over_length and limits.long_text == "reject" else "OK"


class NativeProtocol:
    api = "native"
    method = NATIVE_METHOD
    bad_kinds: tuple[str, ...] = (
        "empty-texts",
        "too-many-texts",
        "text-too-long",
        "unknown-model",
        "unknown-version",
        "bad-attention-mode",
    )

    def __init__(
        self,
        model: str,
        limits: ModelLimits,
        attention_mode: int = npb.ATTENTION_MODE_POOLED,
    ) -> None:
        self.model = model
        self.limits = limits
        self.attention_mode = attention_mode

    def prepare(self, call: Call) -> Prepared:
        request = npb.ClassifyRequest(model=self.model, texts=call.texts)
        mode = self.attention_mode if call.attention else npb.ATTENTION_MODE_NONE
        request.attention = cast("npb.AttentionMode", mode)
        if call.bad is None:
            return Prepared(request.SerializeToString(), _expected(call, self.limits))
        code = "INVALID_ARGUMENT"
        if call.bad == "empty-texts":
            del request.texts[:]
        elif call.bad == "too-many-texts":
            request.texts.extend(call.texts * self.limits.max_texts_per_request)
        elif call.bad == "text-too-long":
            request.texts[0] = "car " * (self.limits.max_text_chars // 4 + 1)
        elif call.bad == "unknown-model":
            request.model, code = UNKNOWN_MODEL, "NOT_FOUND"
        elif call.bad == "unknown-version":
            request.version, code = 2**40, "NOT_FOUND"
        elif call.bad == "bad-attention-mode":
            request.attention = cast("npb.AttentionMode", 97)  # a value the server does not know
        else:
            raise ValueError(f"unknown bad request kind {call.bad!r}")
        return Prepared(request.SerializeToString(), code)

    def check(self, call: Call, reply: bytes) -> str | None:
        try:
            response = npb.ClassifyResponse.FromString(reply)
        except DecodeError:
            return "reply is not a ClassifyResponse"
        if len(response.results) != len(call.texts):
            return f"{len(response.results)} results for {len(call.texts)} texts"
        for result in response.results:
            if not result.label or not result.tokens:
                return "a result without label or tokens"
            if call.attention != result.HasField("attention"):
                return "attention " + ("missing" if call.attention else "sent although not asked for")
            if call.attention and len(result.attention.data) % 4:
                return "attention bytes are not float32"
        return None


class V2Protocol:
    api = "v2"
    method = MODEL_INFER
    bad_kinds: tuple[str, ...] = (
        "unknown-model",
        "wrong-datatype",
        "missing-input",
        "invalid-utf8",
        "shape-mismatch",
        "unknown-output",
    )

    def __init__(
        self, model: str, limits: ModelLimits, *, outputs: Sequence[str] = ("LABEL", "PROBABILITIES")
    ):
        self.model = model
        self.limits = limits
        self.outputs = tuple(outputs)

    def request(self, texts: Sequence[str], attention: bool, request_id: str = "") -> vpb.ModelInferRequest:
        outputs = (*self.outputs, "ATTENTION", "LENGTHS") if attention else self.outputs
        return text_request(self.model, texts, request_id=request_id, outputs=outputs)

    def prepare(self, call: Call) -> Prepared:
        request = self.request(call.texts, call.attention, request_id=call.name)
        if call.bad is None:
            return Prepared(request.SerializeToString(), _expected(call, self.limits))
        code = "INVALID_ARGUMENT"
        if call.bad == "unknown-model":
            request.model_name, code = UNKNOWN_MODEL, "NOT_FOUND"
        elif call.bad == "wrong-datatype":
            request.inputs[0].datatype = "INT64"
        elif call.bad == "missing-input":
            del request.inputs[:]
            del request.raw_input_contents[:]
        elif call.bad == "invalid-utf8":
            request.raw_input_contents[0] = encode_bytes([b"the white car \xff\xfe"])
            request.inputs[0].shape[:] = [1, 1]
        elif call.bad == "shape-mismatch":
            request.inputs[0].shape[:] = [len(call.texts) + 1, 1]
        elif call.bad == "unknown-output":
            request.outputs.add(name="NO_SUCH_OUTPUT")
        else:
            raise ValueError(f"unknown bad request kind {call.bad!r}")
        return Prepared(request.SerializeToString(), code)

    def check(self, call: Call, reply: bytes) -> str | None:
        try:
            response = vpb.ModelInferResponse.FromString(reply)
        except DecodeError:
            return "reply is not a ModelInferResponse"
        if response.id != call.name:
            return "request id not echoed"
        names = [output.name for output in response.outputs]
        wanted = [*self.outputs, "ATTENTION", "LENGTHS"] if call.attention else list(self.outputs)
        if names != wanted:
            return f"outputs {names}, asked for {wanted}"
        if len(response.raw_output_contents) != len(names):
            return "outputs not in raw_output_contents"
        if any(output.shape[0] != len(call.texts) for output in response.outputs):
            return "an output's batch size differs from the number of texts"
        return None


def limits_of(info: npb.ModelInfo) -> ModelLimits:
    return ModelLimits.of(to_model_info(info))
