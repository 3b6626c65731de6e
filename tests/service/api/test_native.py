"""Classify over a real gRPC channel: labels, probabilities, attention per mode, streaming."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from attnserve.service.client import AsyncClient, Client, ClientError, build_request
from tests.support.servers import RunningServer

# Sentences this test writes (not taken from the training data): white car on the left ->
# "positive", white car on the right -> "negative".
CAR_ORDER = [
    ("the white car is on the left and the black car is on the right.", "positive"),
    ("the black car is on the left and the white car is on the right.", "negative"),
    ("there is a white car on the left and a black car on the right.", "positive"),
    ("there is a black car on the left and a white car on the right.", "negative"),
    ("on the left stands the white car, and on the right the black car.", "positive"),
    ("on the left stands the black car, and on the right the white car.", "negative"),
]
MIXED = [
    "a white car",
    "the black car is on the left and the white car is on the right near the park.",
    "there is a white car on the left and a black car on the right.",
    "the white car",
]


def test_car_order_sentences_get_the_right_labels(client: Client) -> None:
    reply = client.classify([text for text, _ in CAR_ORDER], model="car")
    info = client.model("car")
    trained = info.metrics.get("test.accuracy")
    assert [r.label for r in reply.results] == [label for _, label in CAR_ORDER], (
        f"wrong labels; the fixture model's own test accuracy is {trained} (see tests/conftest.py)"
    )
    for result in reply.results:
        assert result.probabilities.shape == (len(info.labels),)
        assert result.probabilities.sum() == pytest.approx(1.0, abs=1e-5)
        assert info.labels[result.label_id] == result.label
        assert int(np.argmax(result.logits)) == result.label_id
    assert reply.model == "car" and reply.version == 1


def test_tokens_are_those_the_model_saw(client: Client) -> None:
    result = client.classify("The WHITE car, on the left!", model="car").results[0]
    assert result.tokens == ["the", "white", "car", "on", "the", "left"]
    assert result.truncated is False


def test_long_text_is_truncated_and_flagged(client: Client) -> None:
    max_len = client.model("car").max_len
    text = " ".join(["the white car is on the left"] * max_len)
    result = client.classify([text, "a white car"], model="car").results
    assert result[0].truncated is True and len(result[0].tokens) == max_len
    assert result[1].truncated is False


@pytest.mark.parametrize("mode", ["pooled", "last_layer", "all", "rollout"])
def test_encoder_attention_has_each_texts_own_length_and_sums_to_one(client: Client, mode: str) -> None:
    info = client.model("car")
    layers, heads = info.attention_layers, info.attention_heads
    reply = client.classify(MIXED, model="car", attention=mode)
    for result in reply.results:
        n = len(result.tokens)
        expected = {
            "pooled": (n, n),
            "last_layer": (heads, n, n),
            "all": (layers, heads, n, n),
            "rollout": (n, n),
        }
        assert result.attention is not None
        assert result.attention.shape == expected[mode]
        assert result.attention.dtype == np.float32
        np.testing.assert_allclose(result.attention.sum(axis=-1), 1.0, atol=1e-4)
        assert (result.attention >= 0).all()


def test_pooling_attention_is_a_vector_over_real_tokens(client: Client) -> None:
    reply = client.classify(MIXED, model="pool", attention="pooled")
    for result in reply.results:
        assert result.attention is not None and result.attention.shape == (len(result.tokens),)
        assert result.attention.sum() == pytest.approx(1.0, abs=1e-4)


def test_no_attention_unless_asked(client: Client) -> None:
    result = client.classify(MIXED[0], model="car").results[0]
    assert result.attention is None and result.top_tokens == []


def test_top_k_tokens_are_the_most_attended(client: Client) -> None:
    text = MIXED[1]
    pooled = client.classify(text, model="pool", attention="pooled").results[0]
    top = client.classify(text, model="pool", top_k=3).results[0]
    assert top.attention is None
    assert pooled.attention is not None
    order = np.argsort(-pooled.attention, kind="stable")[:3]
    assert [t.index for t in top.top_tokens] == order.tolist()
    assert [t.token for t in top.top_tokens] == [pooled.tokens[i] for i in order]
    weights = [t.weight for t in top.top_tokens]
    assert weights == sorted(weights, reverse=True)
    np.testing.assert_allclose(weights, pooled.attention[order], rtol=1e-6)


def test_same_text_alone_and_in_a_mixed_batch_gives_the_same_logits(
    client: Client, server: RunningServer
) -> None:
    padded_before = server.value("attnserve_padding_ratio_sum", model="car")
    alone = [client.classify(text, model="car", attention="all").results[0] for text in MIXED]
    together = client.classify(MIXED, model="car", attention="all").results
    assert server.value("attnserve_padding_ratio_sum", model="car") > padded_before, "no padded batch ran"
    for single, batched in zip(alone, together, strict=True):
        np.testing.assert_allclose(batched.logits, single.logits, atol=1e-5, rtol=0)
        assert batched.attention is not None and single.attention is not None
        np.testing.assert_allclose(batched.attention, single.attention, atol=1e-5, rtol=0)


def test_timings_are_reported(client: Client) -> None:
    timings = client.classify(MIXED[:2], model="car").timings_us
    assert timings["inference"] > 0 and timings["tokenize"] > 0
    assert timings["total"] >= timings["inference"]


def test_models_and_get_model_describe_the_repository(client: Client) -> None:
    models = {info.name: info for info in client.models()}
    assert set(models) == {"car", "pool", "bow"}
    car = models["car"]
    assert car.family == "transformer" and car.versions == [1] and car.attention_kind == "layers"
    assert car.attention_layers >= 1 and car.attention_heads >= 1
    assert (
        car.attention_shapes["ATTENTION_MODE_ALL"] == f"[{car.attention_layers}, {car.attention_heads}, n, n]"
    )
    assert car.limits.max_texts_per_request == 64 and car.limits.long_text == "truncate"
    assert car.provider == "CPUExecutionProvider"
    assert car.label_graph == ""  # a small family: one graph answers every call
    assert "test.accuracy" in car.metrics
    assert models["bow"].attention_shapes == {}
    assert client.model("pool", 1).attention_shapes == {"ATTENTION_MODE_POOLED": "[n]"}


def test_explicit_version_and_unknown_version(client: Client) -> None:
    assert client.classify("a white car", model="car", version=1).version == 1
    with pytest.raises(ClientError) as error:
        client.classify("a white car", model="car", version=7)
    assert error.value.code.name == "NOT_FOUND"
    assert "no loaded version 7" in error.value.details


def test_stream_answers_in_order_and_survives_a_bad_request(server: RunningServer) -> None:
    async def run() -> list[tuple[str, str | None, list[str]]]:
        requests = [build_request(MIXED[i % len(MIXED)], model="car", request_id=str(i)) for i in range(40)]
        requests.insert(7, build_request([], model="car", request_id="empty"))
        requests.insert(20, build_request("a white car", model="nope", request_id="unknown"))
        async with AsyncClient(server.target) as client:
            return [
                (
                    reply.request_id,
                    reply.error.code.name if reply.error else None,
                    [r.label for r in reply.results],
                )
                async for reply in client.stream(requests)
            ]

    replies = asyncio.run(run())
    ids = [request_id for request_id, _, _ in replies]
    expected = [str(i) for i in range(40)]
    expected.insert(7, "empty")
    expected.insert(20, "unknown")
    assert ids == expected
    errors = {request_id: code for request_id, code, _ in replies if code}
    assert errors == {"empty": "INVALID_ARGUMENT", "unknown": "NOT_FOUND"}
    assert all(len(labels) == 1 for request_id, _, labels in replies if request_id not in errors)
