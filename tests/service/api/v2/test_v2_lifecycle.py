"""V2 health while starting, the repository index, and one batcher shared with attnserve.v1."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import grpc
import pytest

from attnserve.service.bundle import MANIFEST_FILE, MODEL_FILE
from attnserve.service.client import Client
from attnserve.service.proto.inference import grpc_service_pb2 as pb
from tests.support.servers import RunningServer, make_settings
from tests.support.v2 import V2Calls, text_request

TEXT = "the white car is on the left of the black car"


def test_health_while_the_models_are_still_loading(model_repository: Path) -> None:
    with RunningServer(make_settings(model_repository), load=False) as server:
        calls = V2Calls(server.target)
        try:
            live = calls.unary("ServerLive", pb.ServerLiveRequest(), pb.ServerLiveResponse)
            ready = calls.unary("ServerReady", pb.ServerReadyRequest(), pb.ServerReadyResponse)
            model = calls.unary("ModelReady", pb.ModelReadyRequest(name="car"), pb.ModelReadyResponse)
            assert isinstance(live, pb.ServerLiveResponse) and live.live
            assert isinstance(ready, pb.ServerReadyResponse) and not ready.ready
            assert isinstance(model, pb.ModelReadyResponse) and not model.ready
            with pytest.raises(grpc.RpcError) as caught:
                calls.infer(text_request("car", [TEXT]))
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        finally:
            calls.close()


def _index(calls: V2Calls, *, ready: bool) -> pb.RepositoryIndexResponse:
    reply = calls.unary("RepositoryIndex", pb.RepositoryIndexRequest(ready=ready), pb.RepositoryIndexResponse)
    assert isinstance(reply, pb.RepositoryIndexResponse)
    return reply


def test_repository_index_reports_refused_versions(model_repository: Path, tmp_path: Path) -> None:
    root = tmp_path / "models"
    shutil.copytree(model_repository / "car" / "1", root / "car" / "1")
    broken = root / "car" / "2"
    shutil.copytree(root / "car" / "1", broken)
    manifest = json.loads((broken / MANIFEST_FILE).read_text())
    manifest["version"] = 2
    (broken / MANIFEST_FILE).write_text(json.dumps(manifest))
    (broken / MODEL_FILE).write_bytes(b"")  # sha256 no longer matches: refused at load
    with RunningServer(make_settings(root)) as server:
        calls = V2Calls(server.target)
        try:
            everything, ready = (_index(calls, ready=flag) for flag in (False, True))
        finally:
            calls.close()
    states = [(m.name, m.version, m.state) for m in everything.models]
    assert states == [("car", "1", "READY"), ("car", "2", "UNAVAILABLE")]
    reasons = [m.reason for m in everything.models]
    # The version's own load failure, not the version policy's view of it; no server path.
    assert reasons[0] == "" and reasons[1].startswith("failed to load: car/2: model.onnx sha256 mismatch")
    assert str(root) not in reasons[1]
    assert [(m.name, m.version) for m in ready.models] == [("car", "1")]


def test_v2_and_native_requests_share_one_batch(model_repository: Path) -> None:
    # A long flush delay: the first text waits for company, so both calls land in one batch.
    settings = make_settings(model_repository, max_delay_ms=300.0)
    with RunningServer(settings) as server, Client(server.target, timeout=30) as client:
        calls = V2Calls(server.target)
        try:
            before = calls.statistics("car")
            start = threading.Barrier(2)
            replies: dict[str, object] = {}

            def native() -> None:
                start.wait()
                replies["native"] = client.classify([TEXT], model="car")

            thread = threading.Thread(target=native)
            thread.start()
            start.wait()
            replies["v2"] = calls.infer(text_request("car", [TEXT]))
            thread.join(30)
            after = calls.statistics("car")
        finally:
            calls.close()
    assert set(replies) == {"native", "v2"}
    assert after.inference_count - before.inference_count == 2
    assert after.execution_count - before.execution_count == 1
