"""Cascade versions in the repository: loaded with their members, hot-reloaded as any version."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from attnserve.service.bundle import BundleError
from attnserve.service.bundle.cascade import read_cascade
from attnserve.service.client import Client
from attnserve.service.settings import model_thread
from tests.support.cascades import NAME, export_duo
from tests.support.servers import RunningServer, make_settings

POLL = 0.2


def _wait(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the repository change was not picked up"
        time.sleep(POLL)


def test_a_new_cascade_version_is_swapped_in(trained_run: Callable[[str], Path], tmp_path: Path) -> None:
    root = tmp_path / "models"
    export_duo(trained_run, root)
    texts = ["hello there", "pizza with cheese", "good morning", "a bowl of soup"]
    with (
        RunningServer(make_settings(root, repository_poll_seconds=POLL)) as server,
        Client(server.target, timeout=30) as client,
    ):
        first = client.classify(texts, model=NAME)
        assert first.version == 1
        assert all(r.answered_by in ("student", "teacher") for r in first.results)
        info = client.model(NAME)
        assert (info.family, info.labels) == ("cascade", read_cascade(root / NAME / "1").manifest.labels)
        assert server.value("attnserve_model_info", model=f"{NAME}.student", version="1") == 1

        export_duo(trained_run, root)  # version 2, published while serving
        _wait(lambda: client.classify(texts, model=NAME).version == 2)
        second = client.classify(texts, model=NAME)
        assert [r.label for r in second.results] == [r.label for r in first.results]
        assert [r.answered_by for r in second.results] == [r.answered_by for r in first.results]
        # The latest policy retires version 1 with its members' series.
        _wait(lambda: server.value("attnserve_model_info", model=f"{NAME}.student", version="1") == 0)

        # A version whose teacher was tampered with is refused; version 2 keeps serving.
        third = root / NAME / ".copy-3"
        shutil.copytree(root / NAME / "2", third)
        graph = third / "teacher" / "model.onnx"
        graph.write_bytes(graph.read_bytes()[:-16] + b"\0" * 16)
        third.rename(root / NAME / "3")
        _wait(lambda: server.value("attnserve_model_load_failures_total", model=NAME) >= 1)
        assert client.classify(texts, model=NAME).version == 2


def test_a_member_file_replaced_in_place_is_reloaded(
    trained_run: Callable[[str], Path], tmp_path: Path
) -> None:
    # `cp` over a member's file changes neither the version folder nor the member's folder.
    root = tmp_path / "models"
    version = export_duo(trained_run, root)
    graph = version / "teacher" / "model.onnx"
    good = graph.read_bytes()
    texts = ["hello there", "pizza with cheese"]
    with (
        RunningServer(make_settings(root, repository_poll_seconds=POLL)) as server,
        Client(server.target, timeout=30) as client,
    ):
        assert server.server is not None
        models = server.server.core.repository
        first = models.models[NAME].versions[1]
        graph.write_bytes(good[:-16] + b"\0" * 16)  # a wrong file copied over the teacher's
        _wait(lambda: server.value("attnserve_model_load_failures_total", model=NAME) >= 1)
        assert models.models[NAME].versions[1] is first  # refused: the loaded one keeps serving
        graph.write_bytes(good)  # the right file copied back
        _wait(lambda: models.models[NAME].versions[1] is not first)
        assert server.value("attnserve_model_load_failures_total", model=NAME) == 1
        assert client.classify(texts, model=NAME).version == 1


def test_model_threads_of_a_cascade_apply_to_its_members(
    trained_run: Callable[[str], Path], tmp_path: Path
) -> None:
    # NAME=N covers both members; NAME.teacher=N (or NAME.student=N) one of them, over NAME=N.
    root = tmp_path / "models"
    export_duo(trained_run, root)
    threads = dict(model_thread(flag) for flag in (f"{NAME}=2", f"{NAME}.teacher=3"))
    with RunningServer(make_settings(root, model_threads=threads)) as server:
        assert server.server is not None
        members = server.server.core.repository.models[NAME].versions[1].cascade
        assert members is not None
        assert (members.student.threads.intra_op, members.student.threads.source) == (2, "server")
        assert (members.teacher.threads.intra_op, members.teacher.threads.source) == (3, "server")
        gauge = "attnserve_model_intra_op_threads"
        assert server.samples(gauge, model=f"{NAME}.student", version="1") == [2.0]
        assert server.samples(gauge, model=f"{NAME}.teacher", version="1") == [3.0]


@pytest.mark.parametrize("member", ["student", "teacher"])
def test_a_cascade_needs_the_members_it_recorded(
    trained_run: Callable[[str], Path], tmp_path: Path, member: str
) -> None:
    root = tmp_path / "models"
    version = export_duo(trained_run, root)
    manifest = version / member / "bundle.json"
    manifest.write_text(manifest.read_text().replace('"max_len"', '"max_len" ', 1))
    with pytest.raises(BundleError, match=member):
        read_cascade(version)


def test_a_cascade_whose_golden_cases_disagree_is_refused(
    trained_run: Callable[[str], Path], tmp_path: Path
) -> None:
    root = tmp_path / "models"
    export_duo(trained_run, root)
    wrong = export_duo(trained_run, root)  # version 2, its first golden case then made to lie
    manifest = json.loads((wrong / "bundle.json").read_text())
    case = manifest["golden"][0]
    case["answered_by"] = "teacher" if case["answered_by"] == "student" else "student"
    (wrong / "bundle.json").write_text(json.dumps(manifest))
    with (
        RunningServer(make_settings(root)) as server,
        Client(server.target, timeout=30) as client,
    ):
        assert client.classify(["hello there"], model=NAME).version == 1
        assert server.value("attnserve_model_load_failures_total", model=NAME) == 1
