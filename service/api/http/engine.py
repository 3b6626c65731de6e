"""The HTTP JSON API's one door into the engine: resolve a model, classify texts.

Kept apart so that a change of the engine's entry point is a change here only. (The V2
REST routes run the V2 servicer's own path, shared with gRPC.)
"""

from __future__ import annotations

from collections.abc import Sequence

from attnserve.service.engine.attention import AttentionMode
from attnserve.service.engine.classify import Inputs, Outputs
from attnserve.service.engine.core import Core
from attnserve.service.engine.model import LoadedModel


def resolve(core: Core, name: str, version: int) -> LoadedModel:
    return core.repository.resolve(name, version)


async def classify(
    core: Core,
    model: LoadedModel,
    texts: Sequence[str],
    mode: AttentionMode,
    top_k: int,
    deadline: float | None,
) -> Outputs:
    return await core.classify(model, Inputs(texts=texts, mode=mode, top_k=top_k, deadline=deadline))
