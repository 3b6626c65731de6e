"""V2 inference requests the way a client library builds them (raw little-endian tensors; TEXT
requests are kit/v2.py's), their outputs decoded, and raw V2 calls."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from google.protobuf.message import Message
from tokenizers import Tokenizer

from attnserve.service.api.v2.tensors import split_bytes
from attnserve.service.proto.inference import grpc_service_pb2 as pb
from kit.perf_analyzer import run_perf_analyzer
from kit.v2 import text_request as text_request  # the one TEXT request builder


def ids_request(
    model: str, ids: np.ndarray, mask: np.ndarray, *, request_id: str = "", outputs: Sequence[str] = ()
) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, id=request_id)
    for name, array in (("INPUT_IDS", ids), ("ATTENTION_MASK", mask)):
        request.inputs.add(name=name, datatype="INT64", shape=array.shape)
        request.raw_input_contents.append(np.ascontiguousarray(array, dtype="<i8").tobytes())
    for name in outputs:
        request.outputs.add(name=name)
    return request


def tokenize(tokenizer_file: Path, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids and mask [B, T] with the bundle's own tokenizer."""
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    rows = [tokenizer.encode(text).ids for text in texts]
    width = max(len(row) for row in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)  # [B, T]
    mask = np.zeros((len(rows), width), dtype=np.int64)  # [B, T]
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


def run_checks(python: Path, script: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Run a Triton client checks script under the tools environment: `spec` in as JSON on
    stdin, its report out as JSON on stdout (starting it costs ~1 s: one run per module)."""
    done = subprocess.run(
        [str(python), str(script)], input=json.dumps(spec), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def output(response: pb.ModelInferResponse, name: str) -> np.ndarray:
    """Decode one output from raw_output_contents, located by its position in `outputs`."""
    names = [tensor.name for tensor in response.outputs]
    index = names.index(name)
    tensor, raw = response.outputs[index], response.raw_output_contents[index]
    if tensor.datatype == "BYTES":
        items = [item.decode() for item in split_bytes(raw, name)]
        return np.array(items, dtype=object).reshape(tuple(tensor.shape))
    dtype = {"FP32": "<f4", "INT64": "<i8", "INT32": "<i4", "BOOL": "?"}[tensor.datatype]
    return np.frombuffer(raw, dtype=dtype).reshape(tuple(tensor.shape))


SERVICE = "/inference.GRPCInferenceService/"


class V2Calls:
    """Raw calls of inference.GRPCInferenceService over a real channel (our own messages)."""

    def __init__(self, target: str) -> None:
        self.channel = grpc.insecure_channel(target)

    def unary(
        self, method: str, request: Message | bytes, reply_type: type[Message], timeout: float = 30
    ) -> Message:
        call = self.channel.unary_unary(
            SERVICE + method,
            request_serializer=lambda m: m if isinstance(m, bytes) else m.SerializeToString(),
            response_deserializer=reply_type.FromString,
        )
        reply: Message = call(request, timeout=timeout)
        return reply

    def infer(self, request: pb.ModelInferRequest | bytes) -> pb.ModelInferResponse:
        reply = self.unary("ModelInfer", request, pb.ModelInferResponse)
        assert isinstance(reply, pb.ModelInferResponse)
        return reply

    def stream(self, requests: list[pb.ModelInferRequest]) -> list[pb.ModelStreamInferResponse]:
        call = self.channel.stream_stream(
            SERVICE + "ModelStreamInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelStreamInferResponse.FromString,
        )
        return list(call(iter(requests), timeout=30))

    def statistics(self, model: str) -> pb.ModelStatistics:
        reply = self.unary(
            "ModelStatistics", pb.ModelStatisticsRequest(name=model), pb.ModelStatisticsResponse
        )
        assert isinstance(reply, pb.ModelStatisticsResponse)
        (stats,) = reply.model_stats
        return stats

    def close(self) -> None:
        self.channel.close()


def perf_analyzer_run(
    perf_analyzer: Path, model: str, target: str, extra: Sequence[str], report: Path
) -> dict[str, str]:
    """One brief perf_analyzer measurement over gRPC at concurrency 2 (0.5 s windows, stability
    loosened for two shared cores); asserts it succeeded and returns its CSV row."""
    done = run_perf_analyzer(target, model, 2, extra, interval_ms=500, trials=5, timeout=120,
                             script=perf_analyzer, report=report)  # fmt: skip
    assert done.row is not None, done.output[-3000:]
    return done.row
