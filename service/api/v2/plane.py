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
from attnserve.service.api.v2.attribution import explain_of
from attnserve.service.api.v2.contract import (
    ATTENTION,
    INPUT_DECLS,
    INPUT_IDS,
    TEXT,
    WINDOWS,
    Contract,
    attention_mode,
    decode_ids,
    inputs_by_name,
    outputs,
    requested_outputs,
)
from attnserve.service.api.v2.description import config, metadata
from attnserve.service.api.v2.stats import StatsTable
from attnserve.service.api.v2.tensors import (
    decode_bytes,
    require,
)
from attnserve.service.api.v2.types import (
    IndexEntry,
    InferRequest,
    InferResponse,
    ModelConfig,
    ModelMetadata,
    ModelStats,
    ServerMetadata,
)
from attnserve.service.bundle import scan
from attnserve.service.calls.record import Call
from attnserve.service.edges import parse_version
from attnserve.service.engine.core import Core
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.request.classify import Inputs
from attnserve.service.engine.request.results import Outputs
from attnserve.service.errors import InvalidArgument, NotFound, ServiceError

SERVER_NAME = "attnserve"
# Only what is implemented in full: RepositoryIndex alone is not the model_repository extension.
EXTENSIONS = ("model_configuration", "statistics")


class V2Plane:
    def __init__(self, core: Core) -> None:
        self.core = core
        self.stats = StatsTable()
        self._server = ServerMetadata(SERVER_NAME, package_version("attnserve"), EXTENSIONS)
        self._contracts: weakref.WeakKeyDictionary[LoadedModel, Contract] = weakref.WeakKeyDictionary()

    # --- health and metadata ------------------------------------------------------------
    def server_metadata(self) -> ServerMetadata:
        return self._server

    def ready(self) -> bool:
        return self.core.serving

    def model_ready(self, name: str, version: str) -> bool:
        """Whether the model version serves; a malformed version is refused, not "not ready"."""
        number = parse_version(version, field="model_version")
        try:
            self._resolve(name, number)
        except ServiceError:
            return False  # an unknown model or version is simply not ready
        return self.ready()

    def resolve(self, name: str, version: str, call: Call | None = None) -> LoadedModel:
        """The version a request names; an inference `call` notes it in its context."""
        return self._resolve(name, parse_version(version, field="model_version"), call)

    def _resolve(self, name: str, version: int, call: Call | None = None) -> LoadedModel:
        if not name and not self.core.settings.default_model:
            raise InvalidArgument(
                "name: the model name is required (or start the server with --default-model)"
            )
        return self.core.resolve(name, version, None if call is None else call.context)

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
        # Noted in the call's context: a refusal from here on counts under the version.
        model = self.resolve(request.model_name, request.model_version, call)
        stats = self.stats.of(model)
        try:
            response, decode_seconds, out, output_seconds = await self._infer(model, request, call)
        except BaseException:
            stats.fail.add(time.perf_counter() - started)
            raise
        timings = out.timings
        attributed = timings.attribution if out.attribution is not None else 0.0
        stats.succeeded(
            time.perf_counter() - started,
            timings.queue,
            decode_seconds + timings.tokenize,
            timings.inference + attributed,  # its attribution's rows too
            output_seconds,
        )
        return response

    async def _infer(
        self, model: LoadedModel, request: InferRequest, call: Call
    ) -> tuple[InferResponse, float, Outputs, float]:
        """(the response, seconds decoding ids, the engine's outputs, seconds building the outputs)"""
        contract = self._contract(model)
        wanted = requested_outputs(request.outputs, contract.declared)
        # The attention output is the bulk of a reply: the batch extracts it only when asked,
        # in the mode asked for (whether the model offers it is the engine's check).
        mode = attention_mode(request, wanted, model)
        explain, wanted = explain_of(request, wanted, named=bool(request.outputs), model=model)
        if not request.outputs and (request.long_text or self.core.settings.long_text) != "windows":
            # Every declared output asked for: WINDOWS only where the texts are read as windows.
            wanted = [name for name in wanted if name != WINDOWS]
        inputs = inputs_by_name(request.inputs)
        if request.id:
            call.name_request(request.id)
        decode_seconds = 0.0
        if TEXT in inputs:
            if len(inputs) > 1:
                raise InvalidArgument("input TEXT: give either TEXT or INPUT_IDS + ATTENTION_MASK, not both")
            tensor = inputs[TEXT]
            require(tensor, "BYTES", INPUT_DECLS[TEXT].shape)
            texts, encoded = decode_bytes(tensor), None
            request_input = TEXT
        else:
            decoding = time.perf_counter()
            texts, encoded = None, decode_ids(inputs)
            request_input = INPUT_IDS
            decode_seconds = time.perf_counter() - decoding
        try:
            asked = Inputs(texts, encoded, mode, explain=explain, long_text=request.long_text)
            out = await self.core.classify(model, asked, call.context)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{_v2_place(exc.field, request_input)}{exc.message}") from None
        writing = time.perf_counter()
        response = InferResponse(model.name, str(model.version), request.id, outputs(wanted, contract, out))
        return response, decode_seconds, out, time.perf_counter() - writing

    def _contract(self, model: LoadedModel) -> Contract:
        contract = self._contracts.get(model)
        if contract is None:
            contract = self._contracts[model] = Contract(model)
        return contract


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
