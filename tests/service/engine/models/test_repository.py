"""Which bundles the server loads: version policy, and refusal of broken or mismatching ones."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from pathlib import Path

import pytest

from attnserve.service.bundle import MANIFEST_FILE, MODEL_FILE, STAGING_PREFIX
from attnserve.service.client import Client
from tests.support.bundles import add_version
from tests.support.servers import RunningServer, make_settings


def test_latest_policy_serves_the_newest_version(repository: Path) -> None:
    add_version(repository, "car", 2)
    with RunningServer(make_settings(repository)) as server, Client(server.target) as client:
        info = client.model("car")
        assert (info.version, info.versions) == (2, [2])
        assert client.classify("a white car", model="car").version == 2
        assert server.samples("attnserve_model_info", model="car", version="1") == []


def test_all_policy_serves_every_version(repository: Path) -> None:
    add_version(repository, "car", 2)
    with (
        RunningServer(make_settings(repository, version_policy="all")) as server,
        Client(server.target) as client,
    ):
        assert client.model("car").versions == [1, 2]
        assert client.classify("a white car", model="car", version=1).version == 1
        assert client.classify("a white car", model="car").version == 2
        assert server.samples("attnserve_model_info", model="car", version="1") == [1.0]


def test_golden_mismatch_is_refused_and_the_older_version_served(
    repository: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = add_version(repository, "car", 2)
    manifest = json.loads((bad / MANIFEST_FILE).read_text())
    manifest["golden"][0]["logits"][0] += 0.5
    (bad / MANIFEST_FILE).write_text(json.dumps(manifest))
    caplog.set_level(logging.WARNING)
    with RunningServer(make_settings(repository)) as server, Client(server.target) as client:
        assert client.model("car").versions == [1]
        assert server.value("attnserve_model_load_failures_total", model="car") == 1
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert any("car version 2 refused: golden case 0" in m and "logits differ by 0.5" in m for m in refused)


@pytest.mark.parametrize("damage", ["tampered", "zero-byte", "no-manifest"])
def test_damaged_newer_version_never_replaces_a_good_one(repository: Path, damage: str) -> None:
    bad = add_version(repository, "car", 2)
    if damage == "tampered":
        data = bytearray((bad / MODEL_FILE).read_bytes())
        data[-10] ^= 0x55
        (bad / MODEL_FILE).write_bytes(bytes(data))
    elif damage == "zero-byte":
        (bad / MODEL_FILE).write_bytes(b"")
    else:
        (bad / MANIFEST_FILE).unlink()
    with RunningServer(make_settings(repository)) as server, Client(server.target) as client:
        assert client.model("car").version == 1
        assert client.classify("a white car", model="car").version == 1
        assert server.value("attnserve_model_load_failures_total", model="car") == 1


def test_staging_folders_and_stray_entries_are_ignored(repository: Path) -> None:
    shutil.copytree(repository / "car" / "1", repository / "car" / f"{STAGING_PREFIX}x1")
    (repository / "car" / "notes.txt").write_text("not a version")
    (repository / ".hidden").mkdir()
    (repository / "README").write_text("not a model")
    with RunningServer(make_settings(repository)) as server, Client(server.target) as client:
        assert sorted(info.name for info in client.models()) == ["car", "pool"]
        assert server.value("attnserve_model_load_failures_total") == 0


def test_one_model_is_the_default_when_the_name_is_empty(model_repository: Path, tmp_path: Path) -> None:
    root = tmp_path / "only"
    shutil.copytree(model_repository / "pool" / "1", root / "pool" / "1")
    with RunningServer(make_settings(root)) as server, Client(server.target) as client:
        assert client.classify("a white car").model == "pool"


def test_publishing_a_new_version_swaps_it_in_and_retires_the_old_one(repository: Path) -> None:
    with RunningServer(make_settings(repository)) as server, Client(server.target) as client:
        assert client.classify("a white car", model="car").version == 1
        add_version(repository, "car", 2)
        assert server.server is not None
        models = server.server.core.repository

        async def swap() -> None:
            loaded = await asyncio.get_running_loop().run_in_executor(None, models.load_version, "car", 2)
            await models.publish(loaded)

        server.run(swap())
        assert client.classify("a white car", model="car").version == 2
        assert client.model("car").versions == [2]
        assert server.samples("attnserve_model_info", model="car", version="1") == []
        assert server.samples("attnserve_model_info", model="car", version="2") == [1.0]
