"""The Open Inference Protocol ("KServe V2") as Triton speaks it: `inference.GRPCInferenceService`.

Same port as attnserve.v1; inference requests join the same batchers. The tensor contract
is in service/v2_model.py, the tensor encoding in service/v2_codec.py. Methods the proto
does not declare are answered UNIMPLEMENTED by grpc itself.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable
from importlib.metadata import version as package_version

import grpc
from google.protobuf.message import Message

from attnserve.service.api.v2.infer import infer
from attnserve.service.api.v2.schema import RequestStats, config, metadata, statistics
from attnserve.service.bundle import scan
from attnserve.service.engine.core import Core, State
from attnserve.service.engine.model import LoadedModel
from attnserve.service.errors import InvalidArgument, NotFound, ServiceError, detached
from attnserve.service.grpc.calls import CallRecord, Calls, Context, M, deadline_of, parse, refuse, too_large
from attnserve.service.proto.inference import grpc_service_pb2 as pb

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
SERVER_NAME = "attnserve"
# Only what is implemented in full: RepositoryIndex alone is not the model_repository extension.
EXTENSIONS = ("model_configuration", "statistics")
Reply = Callable[[M, Context], Awaitable[bytes]]


MAX_VERSION = 2**63 - 1  # what the native API's int64 version field can carry


def parse_version(value: str) -> int:
    """A V2 version string as the repository's number (0: the latest).

    Only ASCII decimal digits without a leading zero: `str.isdigit` also accepts "²" (which
    `int` refuses) and "١" (which `int` reads as 1), and a 5,000-digit string is no version."""
    if not value:
        return 0
    if (
        len(value) > len(str(MAX_VERSION))
        or not value.isascii()
        or not value.isdigit()
        or value[0] == "0"
        or int(value) > MAX_VERSION
    ):
        raise InvalidArgument(
            f"model_version: {value[:32]!r} is not a version number (1, 2, ... up to {MAX_VERSION})"
        )
    return int(value)


class V2Api:
    """Handlers of `inference.GRPCInferenceService`."""

    service_name = SERVICE_NAME

    def __init__(self, core: Core) -> None:
        self.core = core
        self._calls = Calls(core, "v2")
        self._server_version = package_version("attnserve")
        self._stats: weakref.WeakKeyDictionary[LoadedModel, RequestStats] = weakref.WeakKeyDictionary()

    def handler(self) -> grpc.GenericRpcHandler[bytes, bytes]:
        calls = self._calls
        small = self.core.settings.max_metadata_message_bytes

        def info(message_type: type[M], method: Reply[M]) -> grpc.RpcMethodHandler[bytes, bytes]:
            return calls.unary(
                message_type, lambda request, context, _: method(request, context), counted=False
            )

        return calls.service(
            SERVICE_NAME,
            {
                "ServerLive": _ungated(pb.ServerLiveRequest, self.server_live, small),
                "ServerReady": _ungated(pb.ServerReadyRequest, self.server_ready, small),
                "ModelReady": _ungated(pb.ModelReadyRequest, self.model_ready, small),
                "ServerMetadata": _ungated(pb.ServerMetadataRequest, self.server_metadata, small),
                "ModelMetadata": info(pb.ModelMetadataRequest, self.model_metadata),
                "ModelConfig": info(pb.ModelConfigRequest, self.model_config),
                "ModelStatistics": info(pb.ModelStatisticsRequest, self.model_statistics),
                "RepositoryIndex": info(pb.RepositoryIndexRequest, self.repository_index),
                "ModelInfer": calls.unary(pb.ModelInferRequest, self.model_infer),
                "ModelStreamInfer": calls.stream(pb.ModelInferRequest, self.stream_infer, _stream_error),
            },
        )

    # --- health and metadata ------------------------------------------------------------
    async def server_live(self, request: pb.ServerLiveRequest, context: Context) -> bytes:
        return _bytes(pb.ServerLiveResponse(live=True))

    async def server_ready(self, request: pb.ServerReadyRequest, context: Context) -> bytes:
        return _bytes(pb.ServerReadyResponse(ready=self.core.gate.state is State.SERVING))

    async def model_ready(self, request: pb.ModelReadyRequest, context: Context) -> bytes:
        version = parse_version(request.version)  # a malformed version is refused, not "not ready"
        try:
            self.model(request.name, str(version) if version else "")
        except ServiceError:
            ready = False  # an unknown model or version is simply not ready
        else:
            ready = self.core.gate.state is State.SERVING
        return _bytes(pb.ModelReadyResponse(ready=ready))

    async def server_metadata(self, request: pb.ServerMetadataRequest, context: Context) -> bytes:
        reply = pb.ServerMetadataResponse(
            name=SERVER_NAME, version=self._server_version, extensions=EXTENSIONS
        )
        return _bytes(reply)

    def model(self, name: str, version: str) -> LoadedModel:
        if not name and not self.core.settings.default_model:
            raise InvalidArgument(
                "name: the model name is required (or start the server with --default-model)"
            )
        return self.core.repository.resolve(name, parse_version(version))

    async def model_metadata(self, request: pb.ModelMetadataRequest, context: Context) -> bytes:
        model = self.model(request.name, request.version)
        return _bytes(metadata(model, self.core.repository.models[model.name].versions))

    async def model_config(self, request: pb.ModelConfigRequest, context: Context) -> bytes:
        model = self.model(request.name, request.version)
        return _bytes(pb.ModelConfigResponse(config=config(model, self.core.settings)))

    async def model_statistics(self, request: pb.ModelStatisticsRequest, context: Context) -> bytes:
        served = self.core.repository.models
        if request.version:
            models = [self.model(request.name, request.version)]
        elif request.name:
            entry = served[self.model(request.name, "").name]
            models = [entry.versions[v] for v in sorted(entry.versions)]
        else:
            models = [entry.versions[v] for entry in served.values() for v in sorted(entry.versions)]
        stats = [statistics(model, self.request_stats(model)) for model in models]
        return _bytes(pb.ModelStatisticsResponse(model_stats=stats))

    async def repository_index(self, request: pb.RepositoryIndexRequest, context: Context) -> bytes:
        return _bytes(await self.index(request))

    async def index(self, request: pb.RepositoryIndexRequest) -> pb.RepositoryIndexResponse:
        """The repository's models and versions, loaded or not (the HTTP/REST form calls this too)."""
        if request.repository_name:
            raise NotFound("repository_name: this server has one repository; leave repository_name empty")
        loop = asyncio.get_running_loop()
        on_disk = await loop.run_in_executor(None, scan, self.core.settings.repository)
        served = self.core.repository.models
        index = []
        for name in sorted(set(on_disk) | set(served)):
            loaded = served[name].versions if name in served else {}
            for number in sorted(set(on_disk.get(name, [])) | set(loaded)):
                entry = pb.RepositoryIndexResponse.ModelIndex(name=name, version=str(number), state="READY")
                if number not in loaded:
                    if request.ready:
                        continue
                    entry.state = "UNAVAILABLE"
                    failure = self.core.repository.failures.get((name, number))
                    entry.reason = (
                        f"failed to load: {failure}"
                        if failure is not None
                        else _not_served_reason(number, sorted(loaded), self.core.settings.version_policy)
                    )
                index.append(entry)
        return pb.RepositoryIndexResponse(models=index)

    # --- inference ----------------------------------------------------------------------
    def request_stats(self, model: LoadedModel) -> RequestStats:
        stats = self._stats.get(model)
        if stats is None:
            stats = self._stats[model] = RequestStats()
        return stats

    async def model_infer(self, request: pb.ModelInferRequest, context: Context, record: CallRecord) -> bytes:
        response = pb.ModelInferResponse()
        await self.infer_into(request, deadline_of(context), record, response)
        return _bytes(response)

    async def stream_infer(
        self, request: pb.ModelInferRequest, context: Context, record: CallRecord
    ) -> bytes:
        reply = pb.ModelStreamInferResponse()
        await self.infer_into(request, deadline_of(context), record, reply.infer_response)
        return _bytes(reply)

    async def infer_into(
        self,
        request: pb.ModelInferRequest,
        deadline: float | None,
        record: CallRecord,
        response: pb.ModelInferResponse,
    ) -> None:
        """Run one inference request into `response`, counted in the model's V2 statistics
        (the HTTP/REST form of the protocol calls this too)."""
        started = time.perf_counter()
        model = self.model(request.model_name, request.model_version)
        record.model = model.metrics
        stats = self.request_stats(model)
        try:
            timings = await infer(self.core, model, request, deadline, record, response)
        except BaseException:
            stats.fail.add(time.perf_counter() - started)
            raise
        stats.success.add(time.perf_counter() - started)
        stats.queue.add(timings.queue)
        stats.compute_input.add(timings.compute_input)
        stats.compute_infer.add(timings.compute_infer)
        stats.compute_output.add(timings.compute_output)
        stats.last_inference_ms = int(time.time() * 1000)


def _not_served_reason(number: int, loaded: list[int], policy: str) -> str:
    if policy == "latest" and loaded and number < loaded[-1]:
        return f"version policy 'latest' serves version {loaded[-1]}"
    return "refused at load (the server log says why)"


def _stream_error(raw: bytes, error: ServiceError) -> bytes:
    reply = pb.ModelStreamInferResponse(error_message=f"{error.code.name}: {error.message}")
    try:
        request = pb.ModelInferRequest.FromString(raw)
    except Exception:  # the request itself did not parse: no id to echo
        return _bytes(reply)
    reply.infer_response.id = request.id
    reply.infer_response.model_name = request.model_name
    reply.infer_response.model_version = request.model_version
    return _bytes(reply)


def _bytes(message: Message) -> bytes:
    data: bytes = message.SerializeToString()
    return data


def _ungated(message_type: type[M], method: Reply[M], limit: int) -> grpc.RpcMethodHandler[bytes, bytes]:
    """Health and server metadata answer while starting and draining too (no call gate)."""

    async def serve(raw: bytes, context: Context) -> bytes:
        try:
            refused = too_large(raw, limit, "max_metadata_message_bytes")
            if refused is not None:
                raise refused
            return await method(parse(message_type, raw), context)
        except ServiceError as exc:
            error = detached(exc)
        return refuse(context, error)

    return grpc.unary_unary_rpc_method_handler(serve)
