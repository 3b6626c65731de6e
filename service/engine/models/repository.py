"""The set of models being served, read from `<repository>/<name>/<version>/`.

Callers resolve a (name, version) to a `LoadedModel` once per call and keep that object,
so a version swapped out later finishes the calls it accepted. The table of models is an
immutable mapping replaced in one assignment (`publish`), which is what makes a reload
atomic: a new version is loaded and checked off to the side (`load_version`), then published.

What serving a version takes beyond its session (the request path's batcher and runner)
is not the repository's: its owner passes a `Serving` hook, opened for a version before
the version is published and closed after it leaves the table and should be freed
(`retire`). Core passes the request path's `Predictors`; this package imports nothing of
engine/request/.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from attnserve.service.bundle import RepositoryError, confined, scan
from attnserve.service.bundle.cascade import is_cascade
from attnserve.service.engine.metrics import Metrics
from attnserve.service.engine.models.cascade import load_cascade
from attnserve.service.engine.models.choice import check_default_model, unnamed_model
from attnserve.service.engine.models.loading import LoadedModel, LoadError, load_model
from attnserve.service.errors import NotFound
from attnserve.service.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelVersions:
    name: str
    versions: Mapping[int, LoadedModel]
    latest: LoadedModel = field(init=False)  # read by every call that names no version

    def __post_init__(self) -> None:
        object.__setattr__(self, "latest", self.versions[max(self.versions)])


def check_confined(root: Path, version_dir: Path) -> None:
    """Refuse a version folder, or a file in it, whose symlinks lead out of the repository."""
    for path in (version_dir, *(version_dir.iterdir() if version_dir.is_dir() else ())):
        if not confined(root, path):
            raise LoadError(f"{path} leads outside the model repository (symlink); refused")


class Serving(Protocol):
    """What the owner of the repository runs for each served version."""

    def open(self, model: LoadedModel) -> None:
        """Make `model` ready to take calls (it is published right after)."""

    async def close(self, model: LoadedModel) -> None:
        """Finish the calls `model` accepted and free what `open` started."""


class Repository:
    def __init__(self, settings: Settings, metrics: Metrics, serving: Serving) -> None:
        self._settings = settings
        self._metrics = metrics
        self._serving = serving
        self._models: Mapping[str, ModelVersions] = MappingProxyType({})
        self._failures: dict[tuple[str, int], str] = {}

    @property
    def failures(self) -> Mapping[tuple[str, int], str]:
        """Why each version that failed its last load was refused (paths relative to the
        repository, so the reason can be shown to callers)."""
        return MappingProxyType(self._failures)

    @property
    def models(self) -> Mapping[str, ModelVersions]:
        return self._models

    def resolve(self, name: str, version: int = 0) -> LoadedModel:
        models = self._models
        name = name or self._settings.default_model
        if not name:
            if len(models) != 1:
                raise unnamed_model(models)
            entry = next(iter(models.values()))
        else:
            found = models.get(name)
            if found is None:
                raise NotFound(f"model: no model named {name[:64]!r} (ListModels shows the available ones)")
            entry = found
        if version == 0:
            return entry.latest
        loaded = entry.versions.get(version)
        if loaded is None:
            have = ", ".join(str(v) for v in sorted(entry.versions))
            raise NotFound(f"version: model {entry.name!r} has no loaded version {version} (loaded: {have})")
        return loaded

    def load_version(self, name: str, version: int) -> LoadedModel:
        """Load and check one version (blocking); failures are counted and re-raised."""
        root = self._settings.repository
        try:
            version_dir = root / name / str(version)
            check_confined(root, version_dir)
            cascade = is_cascade(version_dir)
            for member_dir in version_dir.iterdir() if cascade else ():  # its members' files too
                check_confined(root, member_dir)
            model = (load_cascade if cascade else load_model)(
                version_dir,
                self._load_settings(),
                self._metrics,
                name=name,
                version=version,
                on_cpu_fallback=self._metrics.cpu_fallback.inc,
            )
        except LoadError as exc:
            self._metrics.load_failed(name)
            log.error("model %s version %d refused: %s", name, version, exc)
            self._failures[(name, version)] = str(exc).replace(f"{root}/", "").replace(str(root), ".")
            raise
        self._failures.pop((name, version), None)
        return model

    def _load_settings(self) -> Settings:
        """The settings a version loads with: left unset, --allow-spinning spins no version that
        shares this process with another, read from the repository as it is now."""
        settings = self._settings
        if settings.allow_spinning is None and self._versions_held() > 1:
            # Each version measured compute-bound takes every core: one's idle threads spinning
            # through its runs would hold the cores the other's batches running beside it need.
            settings = settings.model_copy(update={"allow_spinning": False})
        return settings

    def _versions_held(self) -> int:
        """Versions the repository holds for this process to serve, by the version policy."""
        try:
            found = scan(self._settings.repository, report=False)
        except RepositoryError:  # gone: the load itself reports it
            return 0
        if self._settings.version_policy == "latest":
            return len(found.keys() | self._models.keys())
        return sum(len(versions) for versions in found.values())

    def _load_by_policy(self, name: str, versions: list[int]) -> list[LoadedModel]:
        loaded: list[LoadedModel] = []
        for version in versions:
            try:
                loaded.append(self.load_version(name, version))
            except LoadError:
                continue
            if self._settings.version_policy == "latest":
                if version != versions[0]:
                    log.warning(
                        "model %s: serving version %d because newer versions were refused", name, version
                    )
                break
        return loaded

    async def load_all(self) -> None:
        """Load every model by the version policy; raise RepositoryError if none loads."""
        root = self._settings.repository
        found = scan(root)
        loop = asyncio.get_running_loop()
        for name, versions in found.items():
            loaded = await loop.run_in_executor(None, self._load_by_policy, name, versions)
            for model in loaded:
                await self.publish(model)
        if not self._models:
            detail = "it is empty" if not found else "every version was refused (see the errors above)"
            raise RepositoryError(f"no servable model in {root}: {detail}")
        check_default_model(self._settings, self._models)
        for entry in self._models.values():
            log.info(
                "serving %s versions %s (%s, %s)",
                entry.name,
                sorted(entry.versions),
                entry.latest.manifest.family,
                entry.latest.provider,
            )

    async def publish(self, model: LoadedModel) -> None:
        """Make a loaded, checked version servable in one step.

        The versions it supersedes (the same version number, and under the `latest` policy
        every older one) leave the table in the same assignment, then finish the calls they
        already accepted and are freed: calls never see a half-swapped table.
        """
        self._serving.open(model)
        current = self._models.get(model.name)
        versions = dict(current.versions) if current else {}
        retired = [versions.pop(model.version)] if model.version in versions else []
        if self._settings.version_policy == "latest":
            retired += [versions.pop(version) for version in sorted(versions) if version < model.version]
        versions[model.version] = model
        table = dict(self._models)
        table[model.name] = ModelVersions(model.name, MappingProxyType(versions))
        self._models = MappingProxyType(table)
        for old in retired:
            await self.retire(old)

    def withdraw(self, name: str, versions: Collection[int] | None = None) -> list[LoadedModel]:
        """Stop routing to `versions` of a model (all of them: the model) in one step: later
        calls get NOT_FOUND. Returns the withdrawn versions, whose accepted calls are still
        running: `retire` each of them."""
        current = self._models.get(name)
        if current is None:
            return []
        kept = {v: m for v, m in current.versions.items() if versions is not None and v not in versions}
        table = dict(self._models)
        if kept:
            table[name] = ModelVersions(name, MappingProxyType(kept))
        else:
            del table[name]
        self._models = MappingProxyType(table)
        return [current.versions[version] for version in sorted(set(current.versions) - set(kept))]

    async def retire(self, model: LoadedModel) -> None:
        """Finish a withdrawn version's accepted calls, close what serving it opened and drop
        its metric series."""
        await self._serving.close(model)
        model.metrics.unbind()
        for member in model.cascade.members if model.cascade is not None else ():
            member.metrics.unbind()
        log.info("model %s version %d retired", model.name, model.version)

    async def close(self) -> None:
        """Finish the accepted calls of every version and close what serving them opened."""
        models = [model for entry in self._models.values() for model in entry.versions.values()]
        await asyncio.gather(*(self._serving.close(model) for model in models))
