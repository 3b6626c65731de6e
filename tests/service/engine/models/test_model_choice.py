"""Calls that name no model: the default model, the only model, or INVALID_ARGUMENT listing them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from attnserve.service.bundle import RepositoryError
from attnserve.service.client import Client, ClientError
from attnserve.service.proto.inference import grpc_service_pb2 as v2
from tests.support.servers import RunningServer, make_settings
from tests.support.v2 import V2Calls, output, text_request


def test_no_name_with_several_models_is_invalid_argument_listing_them(server: RunningServer) -> None:
    with Client(server.target) as client:
        call: Callable[[], object]
        for call in (lambda: client.classify("a white car"), lambda: client.model()):
            with pytest.raises(ClientError) as caught:
                call()
            assert caught.value.code is grpc.StatusCode.INVALID_ARGUMENT
            details = caught.value.details
            assert "names no model" in details and "holds 3 (bow, car, pool)" in details
            assert "--default-model" in details
    calls = V2Calls(server.target)
    try:
        with pytest.raises(grpc.RpcError) as v2_caught:
            calls.infer(text_request("", ["a white car"]))
        assert v2_caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "--default-model" in (v2_caught.value.details() or "")
    finally:
        calls.close()


def test_the_default_model_serves_unnamed_calls_in_every_api(model_repository: Path) -> None:
    settings = make_settings(model_repository, default_model="pool")
    with RunningServer(settings) as server, Client(server.target) as client:
        assert client.classify("a white car").model == "pool"
        assert client.model().name == "pool"
        assert client.classify("a white car", model="car").model == "car"  # a name still wins
        calls = V2Calls(server.target)
        try:
            reply = calls.infer(text_request("", ["a white car"], outputs=["LABEL"]))
            assert reply.model_name == "pool"
            assert output(reply, "LABEL").shape[0] == 1
            request = v2.ModelMetadataRequest(name="")
            metadata = calls.unary("ModelMetadata", request, v2.ModelMetadataResponse)
            assert isinstance(metadata, v2.ModelMetadataResponse) and metadata.name == "pool"
        finally:
            calls.close()


def test_a_default_model_that_is_not_served_stops_start_up(model_repository: Path) -> None:
    settings = make_settings(model_repository, default_model="cars")
    expected = r"--default-model 'cars' is not a servable model.*bow, car, pool"
    with pytest.raises(RepositoryError, match=expected), RunningServer(settings):
        pass
