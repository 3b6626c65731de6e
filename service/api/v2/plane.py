"""The V2 plane: the Open Inference Protocol's operations over plain values.

Both V2 front ends are adapters around one `V2Plane`: the gRPC service
(`inference.GRPCInferenceService`, api/grpc/v2.py) and the REST routes (api/http/v2.py). Each
converts its wire form to the types of types.py, calls the plane and converts the result
back; health, metadata, configuration, the repository index, statistics and inference
are decided here once, so both transports give the same answers and count into the same
per-model statistics. Nothing here knows a transport.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from importlib.metadata import version as package_version

from attnserve.service.api.v2 import attribution
from attnserve.service.api.v2.contract import ATTENTION, Contract
from attnserve.service.api.v2.description import config, metadata
from attnserve.service.api.v2.reply import outputs
from attnserve.service.api.v2.request import read
from attnserve.service.api.v2.stats import StatsTable
from attnserve.service.api.v2.types import (
    IndexEntry,
    InferRequest,
    InferResponse,
    ModelConfig,
    ModelMetadata,
    ModelStats,
    RequestStats,
    ServerMetadata,
)
from attnserve.service.bundle import scan
from attnserve.service.calls.record import Call
from attnserve.service.edges import parse_version
from attnserve.service.engine.core import Core
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.errors import InvalidArgument, NotFound, ServiceError

SERVER_NAME = "attnserve"
# Only what is implemented in full: RepositoryIndex alone is not the model_repository extension.
EXTENSIONS = ("model_configuration", "statistics")


class V2Plane:
    def __init__(self, core: Core) -> None:
        self.core = core
        self.stats = StatsTable()
        self._server = ServerMetadata(SERVER_NAME, package_version("attnserve"), EXTENSIONS)
        # Per loaded version: its contract and its request statistics, looked up once a call.
        self._served: weakref.WeakKeyDictionary[LoadedModel, tuple[Contract, RequestStats]] = (
            weakref.WeakKeyDictionary()
        )

    # --- health and metadata ------------------------------------------------------------
    def server_metadata(self) -> ServerMetadata:
        return self._server

    def ready(self) -> bool:
        return self.core.serving

    def model_ready(self, name: str, version: str) -> bool:
        """Whether the model version serves; a malformed version is refused, not "not ready"."""
        parse_version(version, field="model_version")  # refused here, outside the look-up
        try:
            self.resolve(name, version)
        except ServiceError:
            return False  # an unknown model or version is simply not ready
        return self.ready()

    def resolve(self, name: str, version: str) -> LoadedModel:
        """The version a request names ("" is the latest, as most requests name it: no text to parse)."""
        if not name and not self.core.settings.default_model:
            raise InvalidArgument(
                "name: the model name is required (or start the server with --default-model)"
            )
        number = parse_version(version, field="model_version") if version else 0
        return self.core.repository.resolve(name, number)

    def model_metadata(self, name: str, version: str) -> ModelMetadata:
        model = self.resolve(name, version)
        return metadata(model, self.core.repository.models[model.name].versions)

    def model_config(self, name: str, version: str) -> ModelConfig:
        return config(self.resolve(name, version), self.core.settings)

    def statistics(self, name: str, version: str) -> list[ModelStats]:
        """One model version's statistics, a model's (every version) or every model's."""
        served = self.core.repository.models
        if version:
            models = [self.resolve(name, version)]
        elif name:
            entry = served[self.resolve(name, "").name]
            models = [entry.versions[v] for v in sorted(entry.versions)]
        else:
            models = [entry.versions[v] for entry in served.values() for v in sorted(entry.versions)]
        return [self.stats.statistics(model) for model in models]

    async def repository_index(self, repository_name: str = "", ready: bool = False) -> list[IndexEntry]:
        """The repository's models and versions, loaded or not (`ready`: the loaded ones)."""
        if repository_name:
            raise NotFound("repository_name: this server has one repository; leave repository_name empty")
        settings = self.core.settings
        on_disk = await asyncio.get_running_loop().run_in_executor(None, scan, settings.repository)
        repository = self.core.repository
        served = repository.models
        index = []
        for name in sorted(set(on_disk) | set(served)):
            loaded = served[name].versions if name in served else {}
            for number in sorted(set(on_disk.get(name, [])) | set(loaded)):
                if number in loaded:
                    index.append(IndexEntry(name, str(number), "READY"))
                    continue
                if ready:
                    continue
                failure = repository.failures.get((name, number))
                reason = (
                    f"failed to load: {failure}"
                    if failure is not None
                    else _not_served_reason(number, sorted(loaded), settings.version_policy)
                )
                index.append(IndexEntry(name, str(number), "UNAVAILABLE", reason))
        return index

    # --- inference ----------------------------------------------------------------------
    async def infer(self, request: InferRequest, call: Call) -> InferResponse:
        """Run one inference request, counted in the model's V2 statistics."""
        started = call.started
        model = self.resolve(request.model_name, request.model_version)
        # Noted in the call's context: a refusal from here on counts under the version.
        call.context.model = model
        served = self._served.get(model)
        if served is None:
            served = self._served[model] = (Contract(model), self.stats.of(model))
        contract, stats = served
        try:
            if request.id:
                call.name_request(request.id)
            asked = read(request, contract, model, self.core.settings.long_text)
            try:
                out = await self.core.classify(model, asked.inputs, call.context)
            except InvalidArgument as exc:
                raise InvalidArgument(f"{_v2_place(exc.field, asked.input_name)}{exc.message}") from None
            writing = time.perf_counter()
            tensors = outputs(asked.wanted, contract, out)
            written = time.perf_counter()
        except BaseException:
            stats.fail.add(time.perf_counter() - started)
            raise
        timings = out.timings
        attributed = timings.attribution if out.attribution is not None else 0.0
        _succeeded(
            stats,
            written - started,
            timings.queue,
            asked.decode_seconds + timings.tokenize,
            timings.inference + attributed,  # its attribution's rows too
            written - writing,
        )
        return InferResponse(model.name, str(model.version), request.id, tensors)


def _succeeded(
    stats: RequestStats, total: float, queue: float, compute_input: float, infer: float, output: float
) -> None:
    """Count one successful request: its whole time and its parts, in seconds."""
    for duration, seconds in (
        (stats.success, total),
        (stats.queue, queue),
        (stats.compute_input, compute_input),
        (stats.compute_infer, infer),
        (stats.compute_output, output),
    ):
        duration.count += 1
        duration.ns += int(seconds * 1e9)
    stats.last_inference_ms = int(time.time() * 1000)


# The engine's refusals whose field is one of V2's request parameters.
_PARAMETERS = frozenset(attribution.PARAMETERS)


def _v2_place(field: str | None, request_input: str) -> str:
    """What V2 writes before the message of an engine refusal of `field`: "parameters." for a
    request parameter (whose message starts with its name), the ATTENTION output for its
    mode, else the input the texts or ids came in."""
    if field in _PARAMETERS:
        return "parameters."
    if field == "attention":
        return f"output {ATTENTION}: "
    return f"input {request_input}: "


def _not_served_reason(number: int, loaded: list[int], policy: str) -> str:
    if policy == "latest" and loaded and number < loaded[-1]:
        return f"version policy 'latest' serves version {loaded[-1]}"
    return "refused at load (the server log says why)"
