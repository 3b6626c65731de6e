"""The floor: a grpc.aio V2 server that replays attnserve's own replies and does no work.

    python -m bench.serving.systems.floor_server --record-from 127.0.0.1:50051 --model car-order \
        --input-data texts.json --port 50060

It records a running attnserve's replies (metadata, config, readiness, statistics and one
`ModelInfer` per input), then answers each request with the recorded bytes matched by its
input tensors, its own id appended: Python gRPC's cost alone, the bound for a Python server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import grpc
import numpy as np

from attnserve.service.proto.inference import grpc_service_pb2 as pb
from kit.launch import Launched, launched, v2_ready
from kit.ports import free_port
from kit.v2 import text_request

SERVICE = "inference.GRPCInferenceService"
Key = tuple[bytes, ...]
FOR_MODEL = ("ModelReady", "ModelMetadata", "ModelConfig", "ModelStatistics")  # requests that name the model


def requests_of(model: str, data: Path) -> list[pb.ModelInferRequest]:
    """The ModelInfer requests perf_analyzer builds from its --input-data file (batch 1)."""
    built = []
    for entry in json.loads(data.read_text())["data"]:
        request = text_request(model, entry.pop("TEXT")) if "TEXT" in entry else pb.ModelInferRequest()
        request.model_name = model
        for name, value in entry.items():  # the ids inputs
            request.inputs.add(name=name, datatype="INT64", shape=[1, *value["shape"]])
            request.raw_input_contents.append(np.asarray(value["content"], dtype="<i8").tobytes())
        built.append(request)
    return built


def key_of(request: pb.ModelInferRequest) -> Key:
    """The input tensors' bytes in name order (clients list inputs in any order)."""
    pairs = sorted(zip((i.name for i in request.inputs), request.raw_input_contents, strict=True))
    return tuple(part for pair in pairs for part in (pair[0].encode(), pair[1]))


def record(target: str, model: str, inputs: list[Path]) -> tuple[dict[str, bytes], dict[Key, bytes]]:
    """attnserve's replies: by method (fixed) and by input bytes (inference)."""
    with grpc.insecure_channel(target) as channel:

        def ask(method: str, request: object) -> bytes:
            call = channel.unary_unary(f"/{SERVICE}/{method}", None, None)  # raw bytes both ways
            reply: bytes = call(request.SerializeToString(), timeout=30)  # type: ignore[attr-defined]
            return reply

        fixed = {}
        for m in ("ServerLive", "ServerReady", "ServerMetadata", *FOR_MODEL):
            request = getattr(pb, f"{m}Request")  # ServerLive -> ServerLiveRequest
            fixed[m] = ask(m, request(name=model) if m in FOR_MODEL else request())
        infer = {key_of(r): ask("ModelInfer", r) for data in inputs for r in requests_of(model, data)}
    return fixed, infer


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (appending one overrides an earlier scalar)."""
    tag, size, head = (number << 3) | 2, len(payload), bytearray()
    head.append(tag)
    while size >= 0x80:
        head.append((size & 0x7F) | 0x80)
        size >>= 7
    head.append(size)
    return bytes(head) + payload


def handlers(fixed: dict[str, bytes], table: dict[Key, bytes]) -> grpc.GenericRpcHandler[bytes, bytes]:
    served = [0]
    template = pb.ModelStatisticsResponse.FromString(fixed["ModelStatistics"])

    def reply_for(raw: bytes, stream: bool) -> bytes:
        """The recorded reply with the request's id (clients match replies to requests by id)."""
        served[0] += 1
        request = pb.ModelInferRequest.FromString(raw)
        if (found := table.get(key_of(request))) is None:
            print(f"floor: no recorded reply for {str(request)[:600]}", file=sys.stderr)
            raise KeyError("no recorded reply for this request")
        reply = found + _field(3, request.id.encode()) if request.id else found
        return _field(2, reply) if stream else reply

    async def model_infer(raw: bytes, context: object) -> bytes:
        return reply_for(raw, stream=False)

    async def stream_infer(requests: AsyncIterator[bytes], context: object) -> AsyncIterator[bytes]:
        async for raw in requests:
            yield reply_for(raw, stream=True)

    async def statistics(raw: bytes, context: object) -> bytes:
        # perf_analyzer reads the requests served from the counts' growth between two reads.
        reply = pb.ModelStatisticsResponse()
        reply.CopyFrom(template)
        for stats in reply.model_stats:
            stats.inference_count = stats.execution_count = served[0]
            stats.last_inference = int(time.time() * 1000)
            for part in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
                getattr(stats.inference_stats, part).count = served[0]
        data: bytes = reply.SerializeToString()
        return data

    def fixed_reply(reply: bytes) -> grpc.RpcMethodHandler[bytes, bytes]:
        async def answer(raw: bytes, context: object) -> bytes:
            return reply

        return grpc.unary_unary_rpc_method_handler(answer)

    methods = {name: fixed_reply(reply) for name, reply in fixed.items()}
    methods["ModelStatistics"] = grpc.unary_unary_rpc_method_handler(statistics)
    methods["ModelInfer"] = grpc.unary_unary_rpc_method_handler(model_infer)
    methods["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(stream_infer)
    return grpc.method_handlers_generic_handler(SERVICE, methods)


async def serve(handler: grpc.GenericRpcHandler[bytes, bytes], port: int) -> None:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def floor_server(
    source: str, model: str, inputs: Iterable[Path], log: Path
) -> contextlib.AbstractContextManager[Launched]:
    """The floor, recorded from the attnserve at `source`, in a subprocess; ready on entry."""
    port = free_port()
    command = [sys.executable, "-m", "bench.serving.systems.floor_server", "--record-from", source,
               "--model", model, "--port", str(port)]  # fmt: skip
    command += [flag for path in inputs for flag in ("--input-data", str(path))]
    return launched(command, f"127.0.0.1:{port}", v2_ready, "the floor server", log=log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record-from", required=True, help="host:port of a running attnserve")
    parser.add_argument("--model", required=True)
    data = "perf_analyzer input files whose requests are recorded (repeatable)"
    parser.add_argument("--input-data", type=Path, action="append", required=True, help=data)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    fixed, infer = record(args.record_from, args.model, args.input_data)
    print(f"floor: {len(infer)} replies recorded; serving 127.0.0.1:{args.port}", file=sys.stderr)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(handlers(fixed, infer), args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
