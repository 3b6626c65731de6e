"""Every error status of the native API, over real channels; messages name field and limit."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import grpc
import pytest

from attnserve.service.client import AsyncClient, Client, ClientError, build_request
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from tests.support.load import Ledger, record_figures
from tests.support.servers import RunningServer, make_settings
from tests.support.waits import until

CLASSIFY = "/attnserve.v1.Classifier/Classify"
LEAKS = re.compile(r"Traceback|File \"|/tmp/|/work/|\.py\b|Error\(|Exception")


def _status(call: object) -> ClientError:
    with pytest.raises(ClientError) as error:
        call()  # type: ignore[operator]
    assert not LEAKS.search(error.value.details), error.value.details
    return error.value


def test_empty_text_list(client: Client) -> None:
    error = _status(lambda: client.classify([], model="car"))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "texts" in error.details and "at least one" in error.details


def test_too_many_texts(client: Client) -> None:
    error = _status(lambda: client.classify(["a white car"] * 65, model="car"))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "65 texts" in error.details and "limit is 64" in error.details


def test_text_with_too_many_characters(client: Client) -> None:
    error = _status(lambda: client.classify(["a white car", "x" * 10_001], model="car"))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "texts[1]" in error.details and "limit is 10000" in error.details


@pytest.mark.parametrize("text", ["", "   ", "?!,."])
def test_text_without_tokens(client: Client, text: str) -> None:
    error = _status(lambda: client.classify(["a white car", text], model="car"))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT and "texts[1] has no tokens" in error.details


def test_unknown_attention_mode(client: Client) -> None:
    error = _status(lambda: client.classify("a white car", model="car", attention=99))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "attention" in error.details and "99" in error.details


def test_attention_from_a_model_without_any(client: Client) -> None:
    for kwargs in ({"attention": "pooled"}, {"top_k": 2}):
        error = _status(lambda kwargs=kwargs: client.classify("a white car", model="bow", **kwargs))
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT and "no attention weights" in error.details


def test_encoder_only_mode_on_a_pooling_model(client: Client) -> None:
    error = _status(lambda: client.classify("a white car", model="pool", attention="rollout"))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "mode 'rollout' is not available" in error.details


def test_unknown_model_and_version(client: Client) -> None:
    error = _status(lambda: client.classify("a white car", model="no-such-model"))
    assert error.code == grpc.StatusCode.NOT_FOUND and "no-such-model" in error.details
    error = _status(lambda: client.classify("a white car", model="car", version=3))
    assert error.code == grpc.StatusCode.NOT_FOUND and "version" in error.details
    error = _status(lambda: client.classify("a white car"))  # no name, several models, no default
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "names no model" in error.details and "(bow, car, pool)" in error.details


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xff\xff\xff",  # not a protobuf message
        pb.ClassifyRequest(model="car", texts=["a white car"]).SerializeToString()[:-3],  # cut short
        b"\x1a\x03\xc3\x28a",  # texts[0] with invalid UTF-8
    ],
)
def test_corrupt_body_is_invalid_argument(server: RunningServer, body: bytes) -> None:
    with grpc.insecure_channel(server.target) as channel:
        # no serializer: the bytes go out as they are
        raw_call = channel.unary_unary(CLASSIFY, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as error:
            raw_call(body, timeout=10)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = error.value.details()
    assert details is not None
    assert "not a valid attnserve.v1.ClassifyRequest" in details


def test_message_over_the_receive_limit(client: Client) -> None:
    error = _status(lambda: client.classify(["a " * 2_200_000, "b"], model="car"))
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_too_long_text_is_rejected_when_configured(model_repository: Path) -> None:
    with (
        RunningServer(make_settings(model_repository, long_text="reject")) as server,
        Client(server.target) as client,
    ):
        max_len = client.model("car").max_len
        text = " ".join(["the white car"] * max_len)
        error = _status(lambda: client.classify(["a white car", text], model="car"))
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "texts[1]" in error.details and f"max_len of {max_len} tokens" in error.details
        assert client.model("car").limits.long_text == "reject"


def test_unavailable_until_the_models_are_loaded(model_repository: Path) -> None:
    with (
        RunningServer(make_settings(model_repository), load=False) as running,
        Client(running.target) as client,
    ):
        assert client.health() == "NOT_SERVING"
        error = _status(lambda: client.classify("a white car", model="car"))
        assert error.code == grpc.StatusCode.UNAVAILABLE and "not loaded its models yet" in error.details
        assert running.server is not None
        running.run(running.server.load())
        assert client.health() == "SERVING" and client.health("car") == "SERVING"
        assert client.classify("a white car", model="car").results[0].label


def test_queue_full_is_resource_exhausted_and_cancel_frees_the_slot(model_repository: Path) -> None:
    settings = make_settings(
        model_repository, max_queue=4, max_texts_per_request=4, max_delay_ms=3000, max_batch_size=64
    )
    shed = Ledger()
    with RunningServer(settings) as server:

        def depth() -> float:
            return server.value("attnserve_queue_depth", model="car")

        async def scenario() -> None:
            async with AsyncClient(server.target) as client:
                waiting = asyncio.ensure_future(client.classify(["a white car"] * 3, model="car"))
                await until(lambda: depth() >= 3, what="3 texts queued")
                with pytest.raises(ClientError) as error:
                    await client.classify(["a white car"] * 2, model="car")
                assert error.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "queue" in error.value.details and "4 texts" in error.value.details
                # Refused at once: a call that waited for room would wait for the 3 s batch.
                for _ in range(20):
                    await shed.call(lambda: client.classify(["a white car"] * 2, model="car", timeout=1.5))
                assert shed.ended == {"RESOURCE_EXHAUSTED": 20}, shed.details
                call = client._classify(build_request(["a black car"], model="car"))
                await until(lambda: depth() >= 4, what="4 texts queued")
                call.cancel()
                await until(lambda: depth() <= 3, what="the cancelled call's text to leave the queue")
                ok = await client.classify(["a black car"], model="car")  # the freed slot is usable
                assert len(ok.results) == 1
                assert len((await waiting).results) == 3

        asyncio.run(scenario())
        assert server.value("attnserve_queue_depth", model="car") == 0
        assert server.value("attnserve_inflight_requests") == 0
        assert server.value("attnserve_requests_total", model="car", code="RESOURCE_EXHAUSTED") == 21
        assert server.value("attnserve_requests_total", model="car", code="CANCELLED") == 1
    record_figures(
        "calls against a full queue",
        **shed.summary(),
        refusal_ms_p50=shed.ms("RESOURCE_EXHAUSTED", 0.5),
        refusal_ms_max=shed.ms("RESOURCE_EXHAUSTED", 1.0),
    )
