"""The engine's entry for every front end: resolve a model, classify inputs.

A plane (the native plane of attnserve.v1 and the JSON API, the V2 plane) converts its
request into `Inputs`, awaits `Core.classify(model, inputs, context)` with the model's name
(resolved here) or the `LoadedModel` it resolved itself first (`Core.resolve`, when the
request's conversion needs the model) and converts the `Outputs` back; texts of all APIs
join the same batcher. The context (engine/context.py) holds the permit the call took at the
edge (engine/admission.py): the engine runs admitted calls only and never admits one itself.
It writes back into the context what the call layer counts the call under: the version it
resolved, its texts, its outputs.

Core puts the engine together: the model lifecycle (`Repository`, engine/models/) serves
each version through the request path's `Predictors` (engine/request/predictor.py), which
it is handed as its `Serving` hook, and `classify` runs a call on the predictor of the
version it resolved. The tracer, when tracing is on, is given here and reaches the runners.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attnserve.service.engine.admission import Gate, State
from attnserve.service.engine.context import CallContext
from attnserve.service.engine.limits import call_limits
from attnserve.service.engine.metrics import Metrics
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.models.repository import Repository
from attnserve.service.engine.request.cascade import run_cascade
from attnserve.service.engine.request.classify import Inputs, run
from attnserve.service.engine.request.predictor import Predictors
from attnserve.service.engine.request.results import Outputs
from attnserve.service.errors import Internal
from attnserve.service.observe.tracing import Tracing
from attnserve.service.settings import Settings


@dataclass(eq=False)
class Core:
    settings: Settings
    metrics: Metrics
    tracing: Tracing | None = None  # None: tracing is off
    gate: Gate = field(default_factory=Gate)

    def __post_init__(self) -> None:
        self._calls = 0  # calls inside `classify` now
        self.predictors = Predictors(self.settings, self.tracing)
        self.repository = Repository(self.settings, self.metrics, self.predictors)
        self.gate.max_inflight_bytes = self.settings.max_inflight_bytes
        self.limits = call_limits(self.settings)

    @property
    def serving(self) -> bool:
        return self.gate.state is State.SERVING

    def resolve(self, name: str, version: int = 0, context: CallContext | None = None) -> LoadedModel:
        """The model version a call names (0: the latest), noted in the call's `context` (a
        refusal from then on counts under it). Calls that resolve are admitted ones, which
        the gate refuses while the server starts (engine/admission.py)."""
        model = self.repository.resolve(name, version)
        if context is not None:
            context.model = model
        return model

    async def classify(
        self, model: LoadedModel | str, inputs: Inputs, context: CallContext, version: int = 0
    ) -> Outputs:
        """Run an admitted call through the request path (engine/request/classify.py) on
        `model`: a version already resolved, or a model's name, resolved here with `version`
        (0: the latest). `context.permit`: the call's, taken at the edge; a call without a
        live one is a caller's bug."""
        permit = context.permit
        if permit is None or not permit.live:
            raise Internal("a call reached the engine without a live permit")
        if isinstance(model, str):
            model = self.repository.resolve(model, version)
        texts = inputs.texts
        context.model, context.texts = model, len(texts if texts is not None else inputs.encoded or ())
        self._calls += 1
        # Whether the call is the only one in the server (the batcher may then run it on the
        # loop): no other call admitted, counted from its arrival (still reading its body or
        # waiting to resolve), and no other inside the engine (a stream's messages).
        context.alone = self.gate.active <= 1 and self._calls <= 1
        try:
            predictors = self.predictors
            if model.cascade is not None:
                members = model.cascade
                # Both held before any work: a version closing refuses at once, and one held
                # finishes (attribution rows included) before its batcher closes.
                with (
                    predictors.serving(members.student) as student,
                    predictors.serving(members.teacher) as teacher,
                ):
                    outputs = await run_cascade(model, student, teacher, inputs, self.limits, context)
            else:
                with predictors.serving(model) as predictor:
                    outputs = await run(predictor, inputs, self.limits, context)
            context.outputs = outputs
            return outputs
        finally:
            self._calls -= 1
