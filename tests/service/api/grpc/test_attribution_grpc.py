"""Attributions over attnserve.v1 (Classify and ClassifyStream) against a real server serving
the shipped car-order bundle, called with plain grpc stubs; the scores equal the JSON API's."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from tests.support.http import classify as json_classify
from tests.support.servers import RunningServer
from tests.support.shipped import NAME, serving_shipped

TEXTS = ["the white car is left of the black car", "a red car"]
SERVICE = "/attnserve.v1.Classifier/"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with serving_shipped(tmp_path_factory.mktemp("shipped")) as running:
        yield running


@pytest.fixture(scope="module")
def channel(server: RunningServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.target) as opened:
        yield opened


def unary(channel: grpc.Channel, request: pb.ClassifyRequest) -> pb.ClassifyResponse:
    call = channel.unary_unary(
        SERVICE + "Classify",
        request_serializer=pb.ClassifyRequest.SerializeToString,
        response_deserializer=pb.ClassifyResponse.FromString,
    )
    reply: pb.ClassifyResponse = call(request, timeout=30)
    return reply


def stream(channel: grpc.Channel, requests: list[pb.ClassifyRequest]) -> list[pb.ClassifyResponse]:
    call = channel.stream_stream(
        SERVICE + "ClassifyStream",
        request_serializer=pb.ClassifyRequest.SerializeToString,
        response_deserializer=pb.ClassifyResponse.FromString,
    )
    return list(call(iter(requests), timeout=30))


def request(method: int, budget: int = 0, request_id: str = "") -> pb.ClassifyRequest:
    return pb.ClassifyRequest(
        model=NAME,
        texts=TEXTS,
        attribution=method,  # type: ignore[arg-type]  # a number of the enum, or not
        attribution_budget=budget,
        request_id=request_id,
    )


def assert_attributed(reply: pb.ClassifyResponse) -> None:
    for result in reply.results:
        scores = np.asarray(result.attribution)
        assert len(scores) == len(result.tokens)
        assert not scores[np.asarray(result.special)].any()  # [CLS], [SEP]: never scored
        assert scores[~np.asarray(result.special)].any()
        assert result.attribution_rows > 0
    assert reply.timings.attribution_us > 0


@pytest.mark.parametrize(
    "method", [pb.ATTRIBUTION_METHOD_OCCLUSION, pb.ATTRIBUTION_METHOD_SHAPLEY], ids=["occlusion", "shapley"]
)
def test_classify_scores_every_token_as_the_json_api_does(
    server: RunningServer, channel: grpc.Channel, method: int
) -> None:
    reply = unary(channel, request(method))
    assert_attributed(reply)
    assert server.server is not None
    word = pb.AttributionMethod.Name(method).removeprefix("ATTRIBUTION_METHOD_").lower()
    body = json_classify(server.server.http_port, NAME, {"texts": TEXTS, "attribution": word}).json()
    assert body["attribution"] == word
    for result, expected in zip(reply.results, body["results"], strict=True):
        np.testing.assert_allclose(result.attribution, expected["attribution"], atol=1e-6)
        assert result.attribution_rows == expected["attribution_rows"]


def test_occlusion_takes_a_row_per_word(channel: grpc.Channel) -> None:
    # The text itself is not run again: its value is the reply's own probability.
    reply = unary(channel, request(pb.ATTRIBUTION_METHOD_OCCLUSION))
    assert [r.attribution_rows for r in reply.results] == [9, 3]  # 9 and 3 words


def test_no_attribution_unless_asked(channel: grpc.Channel) -> None:
    for method in (pb.ATTRIBUTION_METHOD_UNSPECIFIED, pb.ATTRIBUTION_METHOD_NONE):
        reply = unary(channel, request(method))
        assert all(not r.attribution and r.attribution_rows == 0 for r in reply.results)
        assert reply.timings.attribution_us == 0


def test_classify_stream_carries_attributions_and_errors(channel: grpc.Channel) -> None:
    replies = stream(
        channel,
        [
            request(pb.ATTRIBUTION_METHOD_OCCLUSION, request_id="occlusion"),
            request(pb.ATTRIBUTION_METHOD_SHAPLEY, budget=100_000, request_id="over"),
            request(pb.ATTRIBUTION_METHOD_SHAPLEY, budget=16, request_id="shapley"),
        ],
    )
    assert [r.request_id for r in replies] == ["occlusion", "over", "shapley"]
    assert_attributed(replies[0])
    assert_attributed(replies[2])
    assert [r.attribution_rows for r in replies[2].results] == [15, 7]  # 3 words: 2^3 coalitions but one
    assert replies[1].error.code_name == "INVALID_ARGUMENT"
    assert "max_attribution_rows" in replies[1].error.message


def test_a_budget_over_the_cap_is_invalid(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        unary(channel, request(pb.ATTRIBUTION_METHOD_SHAPLEY, budget=513))
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == (
        "attribution_budget: 513 coalitions per text asked; this server runs at most 512 rows in one "
        "call (max_attribution_rows)"
    )


def test_an_unknown_method_is_invalid(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        unary(channel, request(9))
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    details = raised.value.details() or ""
    assert details.startswith("attribution: unknown attribution method 9;")
    assert "ATTRIBUTION_METHOD_SHAPLEY" in details
