"""Repository changes picked up while serving: new, changed and removed model versions.

Each version folder has a fingerprint (name, size and modification time of its files). A
version whose fingerprint differs from the one it was loaded or refused with is loaded off
to the side (verified, warmed up, golden-checked by `Repository.load_version`) and only then
swapped in by `Repository.publish`; calls in flight finish on the version they resolved. A
version that fails its checks is counted and logged, the version being served stays, and
the failure is not retried until the folder's files change (a half-copied folder is tried
again once the copy completes). Versions whose folder is gone are unloaded.

`repository_poll_seconds` runs this on a timer; the admin API runs it on demand for named
models. A model unloaded through the admin API is left alone by the timer until an
explicit reload names it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attnserve.service.bundle import Fingerprint, fingerprint, scan
from attnserve.service.engine.models.loading import LoadedModel, LoadError
from attnserve.service.engine.models.repository import Repository
from attnserve.service.errors import NotFound
from attnserve.service.settings import Settings

log = logging.getLogger(__name__)

Disk = dict[str, dict[int, Fingerprint]]
OnChange = Callable[[str, bool], Awaitable[None]]


def read_disk(root: Path) -> Disk:
    """Every model's complete version folders with their fingerprints (blocking)."""
    disk: Disk = {}
    for name, versions in scan(root, report=False).items():
        prints = {}
        for version in versions:
            with contextlib.suppress(OSError):  # removed while we looked: absent
                prints[version] = fingerprint(root / name / str(version))
        disk[name] = prints
    return disk


@dataclass
class ModelReport:
    """What one reload did to one model."""

    name: str
    loaded: list[int] = field(default_factory=list)  # new or changed versions swapped in
    refused: list[int] = field(default_factory=list)  # versions that failed their checks
    removed: list[int] = field(default_factory=list)  # versions no longer served
    serving: list[int] = field(default_factory=list)  # versions served afterwards


class Reloader:
    def __init__(self, settings: Settings, repository: Repository, on_change: OnChange) -> None:
        self._root = settings.repository
        self._latest = settings.version_policy == "latest"
        self._poll_seconds = settings.repository_poll_seconds
        self._repository = repository
        self._on_change = on_change
        self._loaded: dict[tuple[str, int], Fingerprint] = {}
        self._refused: dict[tuple[str, int], Fingerprint] = {}
        self._held: set[str] = set()
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def disk(self) -> Disk:
        return await asyncio.get_running_loop().run_in_executor(None, read_disk, self._root)

    def prime(self, disk: Disk) -> None:
        """Record what start-up loaded (`disk` read before it) so that is not loaded again."""
        served = self._repository.models
        for name, versions in disk.items():
            entry = served.get(name)
            have = entry.versions if entry else {}
            newest = max(have, default=0)
            for version, prints in versions.items():
                if version in have:
                    self._loaded[(name, version)] = prints
                elif not self._latest or version > newest:  # tried at start-up and refused
                    self._refused[(name, version)] = prints

    async def reload(self, names: Sequence[str] | None = None) -> list[ModelReport]:
        """Bring the named models (None: every model, as the timer does) in line with the disk.

        Naming a model is explicit: its refused versions are tried again and an admin
        unload is lifted. NotFound when a named model is neither on disk nor served."""
        async with self._lock:
            disk = await self.disk()
            served = self._repository.models
            if names is None:
                targets = sorted((set(disk) | set(served)) - self._held)
            else:
                targets = list(dict.fromkeys(names))
                for name in targets:
                    if name not in disk and name not in served:
                        raise NotFound(f"model: no model folder named {name!r} in the repository")
                    self._held.discard(name)
                    self._refused = {key: fp for key, fp in self._refused.items() if key[0] != name}
            return [await self._reconcile(name, disk.get(name, {})) for name in targets]

    async def unload(self, name: str) -> ModelReport:
        """Stop serving a model (calls in flight finish); the timer will not load it again."""
        async with self._lock:
            entry = self._repository.models.get(name)
            if entry is None:
                raise NotFound(f"model: no loaded model named {name!r}")
            self._held.add(name)
            report = ModelReport(name, removed=sorted(entry.versions))
            withdrawn = self._repository.withdraw(name)
            self._forget(name, report.removed)
            await self._on_change(name, False)
            await self._retire(withdrawn)
            log.info("model %s unloaded (versions %s) by the admin API", name, report.removed)
            return report

    async def _reconcile(self, name: str, disk: dict[int, Fingerprint]) -> ModelReport:
        report = ModelReport(name)
        before = self._repository.models.get(name)
        served = dict(before.versions) if before else {}
        loop = asyncio.get_running_loop()
        # Under `latest` an older version never displaces a newer one that is still on disk.
        floor = max((v for v in served if v in disk), default=0) if self._latest else 0
        for version in sorted(disk, reverse=True):
            if version < floor:
                break
            prints = disk[version]
            if version in served and self._loaded.get((name, version)) == prints:
                if self._latest:
                    break
                continue
            if self._refused.get((name, version)) == prints:
                continue
            try:
                model = await loop.run_in_executor(None, self._repository.load_version, name, version)
            except LoadError:  # counted and logged with the reason by load_version
                self._refused[(name, version)] = prints
                report.refused.append(version)
                continue
            await self._repository.publish(model)
            self._loaded[(name, version)] = prints
            self._refused.pop((name, version), None)
            report.loaded.append(version)
            log.info("model %s version %d loaded, checked and swapped in", name, version)
            if self._latest:
                break
        current = self._repository.models.get(name)
        gone = [v for v in (current.versions if current else {}) if v not in disk]
        withdrawn = self._repository.withdraw(name, gone) if gone else []
        after = self._repository.models.get(name)
        report.serving = sorted(after.versions) if after else []
        report.removed = sorted(set(served) - set(report.serving))
        self._forget(name, report.removed)
        if (before is None) != (after is None):
            await self._on_change(name, after is not None)
        if withdrawn:
            await self._retire(withdrawn)
            log.info("model %s: versions %s unloaded (their folders are gone)", name, gone)
        return report

    async def _retire(self, withdrawn: Sequence[LoadedModel]) -> None:
        """Let withdrawn versions finish their accepted calls, after health has followed the
        routing table: while they drain, new calls already get NOT_FOUND."""
        for model in withdrawn:
            await self._repository.retire(model)

    def _forget(self, name: str, versions: Sequence[int]) -> None:
        for version in versions:
            self._loaded.pop((name, version), None)

    # --- the timer ----------------------------------------------------------------------
    def start(self) -> None:
        if self._poll_seconds > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._poll(), name="repository-poll")

    async def _poll(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._stop.wait(), self._poll_seconds)
                return
            except TimeoutError:
                pass
            try:
                await self.reload()
            except Exception:  # the next round tries again; serving goes on meanwhile
                log.exception("repository poll failed")

    async def stop(self, timeout: float) -> None:
        """Stop the timer, letting a reload in progress finish for at most `timeout` seconds."""
        self._stop.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
