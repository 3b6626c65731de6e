"""The admin API: off by default; reload and unload by model name only, inside the
repository (symlinks leading out of it are refused)."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import grpc
import pytest

from attnserve.service.client import Client, ClientError
from attnserve.service.client.admin import AdminClient
from tests.support.bundles import add_version
from tests.support.servers import RunningServer, make_settings, plain_settings


def _error(call: object) -> ClientError:
    with pytest.raises(ClientError) as caught:
        call()  # type: ignore[operator]
    return caught.value


def test_the_admin_api_is_off_by_default(model_repository: Path) -> None:
    assert plain_settings().admin is False and plain_settings().auth is False
    with RunningServer(make_settings(model_repository)) as server, AdminClient(server.target) as admin:
        assert _error(lambda: admin.reload("car")).code == grpc.StatusCode.UNIMPLEMENTED


def test_admin_on_a_public_address_needs_auth(model_repository: Path) -> None:
    with pytest.raises(ValueError, match="admin on a non-loopback host needs auth"):
        plain_settings(repository=model_repository, admin=True, host="0.0.0.0")
    with pytest.raises(ValueError, match="admin needs workers = 1"):
        plain_settings(repository=model_repository, admin=True, workers=2, port=50051)


def test_reload_swaps_in_new_versions_and_reports_refusals(repository: Path) -> None:
    with (
        RunningServer(make_settings(repository, admin=True)) as server,
        AdminClient(server.target) as admin,
        Client(server.target) as client,
    ):
        assert admin.reload() == {
            "car": {"loaded": [], "refused": [], "removed": [], "serving": [1]},
            "pool": {"loaded": [], "refused": [], "removed": [], "serving": [1]},
        }
        add_version(repository, "car", 2)
        add_version(repository, "car", 3, damage="golden mismatch")
        assert admin.reload("car") == {"car": {"loaded": [2], "refused": [3], "removed": [1], "serving": [2]}}
        assert client.classify("a white car", model="car").version == 2
        shutil.copytree(repository / "pool", repository / "fresh")
        manifest = (repository / "fresh" / "1" / "bundle.json").read_text()
        (repository / "fresh" / "1" / "bundle.json").write_text(
            manifest.replace('"name": "pool"', '"name": "fresh"')
        )
        assert admin.reload("fresh")["fresh"]["serving"] == [1]  # a new model, by name
        assert client.health("fresh") == "SERVING"
        assert client.classify("a white car", model="fresh").model == "fresh"
        assert server.value("attnserve_model_load_failures_total", model="car") == 1


NOT_NAMES = [
    "../car",
    "car/1",
    "/etc/passwd",
    "..",
    ".",
    ".hidden",
    "a..b",
    "https://x.io/m",
    "car\\1",
    "c a r",
    "car\n",
    "",
]


def test_only_plain_model_names_are_accepted(repository: Path) -> None:
    with RunningServer(make_settings(repository, admin=True)) as server, AdminClient(server.target) as admin:
        for name in NOT_NAMES:
            for call in (lambda n=name: admin.reload("car", n), lambda n=name: admin.unload(n)):
                error = _error(call)
                assert error.code == grpc.StatusCode.INVALID_ARGUMENT, name
                assert "not a model name" in error.details and "never paths" in error.details
                assert str(repository) not in error.details
        assert _error(lambda: admin.reload("ghost")).code == grpc.StatusCode.NOT_FOUND
        assert admin.reload("car")["car"]["serving"] == [1]


def test_symlinks_leading_out_of_the_repository_are_refused(
    repository: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outside = tmp_path / "outside"
    shutil.copytree(repository / "pool", outside / "pool")
    os.symlink(outside / "pool", repository / "evil")  # a model folder elsewhere
    os.symlink(outside / "pool" / "1", repository / "car" / "5")  # a version folder elsewhere
    add_version(repository, "car", 6)
    (repository / "car" / "6" / "model.onnx").unlink()
    os.symlink(outside / "pool" / "1" / "model.onnx", repository / "car" / "6" / "model.onnx")  # one file
    caplog.set_level(logging.INFO)
    with (
        RunningServer(make_settings(repository, admin=True)) as server,
        AdminClient(server.target) as admin,
        Client(server.target) as client,
    ):
        assert sorted(m.name for m in client.models()) == ["car", "pool"]
        assert client.model("car").versions == [1]
        assert _error(lambda: admin.reload("evil")).code == grpc.StatusCode.NOT_FOUND
        assert admin.reload("car")["car"] == {"loaded": [], "refused": [6], "removed": [], "serving": [1]}
    messages = [r.getMessage() for r in caplog.records]
    assert any("skipping evil: a symlink leading outside the repository" in m for m in messages)
    assert any("skipping car/5: a symlink leading outside the repository" in m for m in messages)
    assert any("car version 6 refused" in m and "leads outside the model repository" in m for m in messages)


def test_unload_holds_a_model_until_a_reload_names_it(repository: Path) -> None:
    settings = make_settings(repository, admin=True, repository_poll_seconds=0.1)
    with (
        RunningServer(settings) as server,
        AdminClient(server.target) as admin,
        Client(server.target) as client,
    ):
        assert admin.unload("pool") == {"loaded": [], "refused": [], "removed": [1], "serving": []}
        assert _error(lambda: client.classify("a white car", model="pool")).code == grpc.StatusCode.NOT_FOUND
        assert client.health("pool") == "NOT_SERVING"
        server.run(server.server.reloader.reload())  # type: ignore[union-attr]  # what a poll does
        assert "pool" not in [m.name for m in client.models()]
        assert _error(lambda: admin.unload("pool")).code == grpc.StatusCode.NOT_FOUND
        assert admin.reload("pool")["pool"]["serving"] == [1]
        assert client.classify("a white car", model="pool").model == "pool"
        assert client.health("pool") == "SERVING"
