"""Which model serves a call that names none: `settings.default_model`, else the only one.

With several models and no default the call is refused with INVALID_ARGUMENT listing the
models (the caller's request is incomplete, nothing is missing on the server).
"""

from __future__ import annotations

from collections.abc import Collection

from attnserve.service.bundle import RepositoryError
from attnserve.service.errors import InvalidArgument, NotFound, ServiceError
from attnserve.service.settings import Settings

_LISTED = 10  # model names spelled out in a message; the rest are counted


def model_list(names: Collection[str]) -> str:
    ordered = sorted(names)
    shown = ", ".join(ordered[:_LISTED])
    return shown + (f" and {len(ordered) - _LISTED} more" if len(ordered) > _LISTED else "")


def unnamed_model(names: Collection[str]) -> ServiceError:
    """The error of a call naming no model where the server cannot pick one for it."""
    if not names:
        return NotFound("model: this server holds no model at the moment")
    return InvalidArgument(
        f"model: the call names no model and this server holds {len(names)} ({model_list(names)}); "
        "name one, or start the server with --default-model NAME (ATTNSERVE_DEFAULT_MODEL)"
    )


def check_default_model(settings: Settings, names: Collection[str]) -> None:
    """Refuse to start with a default model that is not served: a typo would fail every call."""
    name = settings.default_model
    if name and name not in names:
        raise RepositoryError(
            f"--default-model {name!r} is not a servable model of {settings.repository} "
            f"(it holds: {model_list(names)})"
        )
