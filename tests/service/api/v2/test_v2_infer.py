"""V2 inference over a real channel: tensor forms, requested outputs, attention, metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnserve.service.client import Client
from attnserve.service.proto.inference import grpc_service_pb2 as pb
from tests.support.servers import RunningServer
from tests.support.v2 import V2Calls, ids_request, output, text_request, tokenize

TEXTS = ["the white car is on the left of the black car", "a red car", "the blue car is behind the car"]


def test_typed_contents_equal_raw_contents(v2: V2Calls, model_repository: Path) -> None:
    raw_text = v2.infer(text_request("car", TEXTS))
    typed = pb.ModelInferRequest(model_name="car")
    tensor = typed.inputs.add(name="TEXT", datatype="BYTES", shape=[len(TEXTS), 1])
    tensor.contents.bytes_contents.extend(text.encode() for text in TEXTS)
    typed_text = v2.infer(typed)

    ids, mask = tokenize(model_repository / "car" / "1" / "tokenizer.json", TEXTS)
    typed_ids = pb.ModelInferRequest(model_name="car")
    for name, array in (("INPUT_IDS", ids), ("ATTENTION_MASK", mask)):
        typed_ids.inputs.add(name=name, datatype="INT64", shape=array.shape).contents.int64_contents.extend(
            array.ravel().tolist()
        )
    replies = [typed_text, v2.infer(typed_ids), v2.infer(ids_request("car", ids, mask))]
    for reply in replies:
        for name in ("LOGITS", "PROBABILITIES", "ATTENTION", "LENGTHS"):
            np.testing.assert_allclose(output(reply, name), output(raw_text, name), atol=1e-5)
        assert output(reply, "LABEL").tolist() == output(raw_text, "LABEL").tolist()


def test_only_the_requested_outputs_are_sent_in_request_order(v2: V2Calls) -> None:
    reply = v2.infer(text_request("car", TEXTS, request_id="r-7", outputs=["LENGTHS", "LABEL"]))
    assert reply.id == "r-7" and reply.model_name == "car" and reply.model_version == "1"
    assert [t.name for t in reply.outputs] == ["LENGTHS", "LABEL"]
    assert len(reply.raw_output_contents) == 2
    assert not any(t.HasField("contents") for t in reply.outputs)
    assert list(reply.outputs[1].shape) == [len(TEXTS), 1]


def test_outputs_match_the_native_api_and_attention_is_padded_with_zeros(
    v2: V2Calls, server: RunningServer
) -> None:
    with Client(server.target, timeout=30) as client:
        native = client.classify(TEXTS, model="pool", attention="pooled")
    reply = v2.infer(text_request("pool", TEXTS))
    lengths = output(reply, "LENGTHS")
    attention = output(reply, "ATTENTION")  # [B, T]: a pooling model
    assert lengths.tolist() == [len(r.tokens) for r in native.results]
    assert attention.shape == (len(TEXTS), max(lengths))
    for row, n, result in zip(attention, lengths, native.results, strict=True):
        assert result.attention is not None
        np.testing.assert_allclose(row[:n], result.attention, atol=1e-5)
        np.testing.assert_allclose(row[:n].sum(), 1.0, atol=1e-5)
        assert not row[n:].any()
    np.testing.assert_allclose(output(reply, "LOGITS"), [r.logits for r in native.results], atol=1e-5)
    assert output(reply, "LABEL")[:, 0].tolist() == [r.label for r in native.results]


def test_a_model_without_attention_declares_and_sends_none(v2: V2Calls) -> None:
    reply = v2.infer(text_request("bow", TEXTS))
    assert [t.name for t in reply.outputs] == ["LOGITS", "PROBABILITIES", "LABEL", "LENGTHS"]
    metadata = v2.unary("ModelMetadata", pb.ModelMetadataRequest(name="bow"), pb.ModelMetadataResponse)
    assert isinstance(metadata, pb.ModelMetadataResponse)
    assert "ATTENTION" not in [t.name for t in metadata.outputs]


def test_successful_calls_are_counted_for_the_v2_api(server: RunningServer, v2: V2Calls) -> None:
    def count() -> float:
        return server.value(
            "attnserve_requests_total", protocol="v2", transport="grpc", model="car", code="OK"
        )

    before = count()
    v2.infer(text_request("car", TEXTS[:1]))
    v2.stream([text_request("car", TEXTS[:1], request_id=str(i)) for i in range(3)])
    assert count() == before + 4


def test_statistics_follow_each_request(v2: V2Calls) -> None:
    before = v2.statistics("car")
    v2.infer(text_request("car", TEXTS))
    after = v2.statistics("car")
    assert after.inference_count - before.inference_count == len(TEXTS)
    assert after.inference_stats.success.count - before.inference_stats.success.count == 1
    assert after.inference_stats.success.ns > before.inference_stats.success.ns
    assert after.execution_count > before.execution_count
    assert after.last_inference >= before.last_inference and after.last_inference > 0
