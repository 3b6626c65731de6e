"""The request mix: shares respected, lengths in their classes, bad requests built right."""

from __future__ import annotations

import itertools

import pytest

from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as npb
from attnserve.service.proto.inference import grpc_service_pb2 as vpb
from loadtest.protocol import NativeProtocol, V2Protocol
from loadtest.workload import LENGTH_CLASSES, Mix, ModelLimits, Workload, word_span

LIMITS = ModelLimits(max_len=48, max_texts_per_request=16, max_text_chars=500)


def test_word_spans_cover_short_to_over_length_without_overlap() -> None:
    spans = [word_span(name, 48) for name in LENGTH_CLASSES]
    for (_, high), (low, _) in itertools.pairwise(spans):
        assert high < low
    assert spans[-1][0] > 48  # over-length texts really are longer than max_len


def test_the_draws_follow_the_mix_and_the_seed() -> None:
    mix = Mix(attention_share=0.5, batch_share=0.25, bad_share=0.1, deadline_share=0.2)
    workload, twin = Workload(mix, LIMITS, ("x",), seed=3), Workload(mix, LIMITS, ("x",), seed=3)
    calls = [workload.next_call() for _ in range(2000)]
    assert calls[:50] == [twin.next_call() for _ in range(50)]
    assert len(set(calls)) > 1000
    bad = sum(c.bad is not None for c in calls) / len(calls)
    good = [c for c in calls if c.bad is None]
    assert 0.05 < bad < 0.15
    assert 0.4 < sum(c.attention for c in good) / len(good) < 0.6
    assert 0.15 < sum(len(c.texts) > 1 for c in good) / len(good) < 0.35
    assert max(len(c.texts) for c in calls) <= LIMITS.max_texts_per_request
    assert 0.15 < sum(c.deadline_s is not None for c in calls) / len(calls) < 0.25
    over = [c for c in good if c.over_length]
    assert over and all(any(len(t.split()) > LIMITS.max_len for t in c.texts) for c in over)


def test_a_mix_with_an_impossible_share_is_refused() -> None:
    with pytest.raises(ValueError, match="bad_share"):
        Mix(bad_share=1.5)
    with pytest.raises(ValueError, match="lengths"):
        Mix(lengths=(0.0, 0.0, 0.0, 0.0))


@pytest.mark.parametrize("protocol", [NativeProtocol("car", LIMITS), V2Protocol("car", LIMITS)])
def test_every_bad_kind_builds_a_request_with_its_documented_status(
    protocol: NativeProtocol | V2Protocol,
) -> None:
    workload = Workload(Mix(bad_share=1.0), LIMITS, protocol.bad_kinds, seed=0)
    seen = {}
    for _ in range(300):
        call = workload.next_call()
        assert call.bad is not None
        seen[call.bad] = protocol.prepare(call).expected
    assert set(seen) == set(protocol.bad_kinds)
    assert seen["unknown-model"] == "NOT_FOUND"
    assert {code for kind, code in seen.items() if kind not in ("unknown-model", "unknown-version")} == {
        "INVALID_ARGUMENT"
    }


def test_requests_carry_the_texts_and_attention_of_the_call() -> None:
    call = Workload(Mix(attention_share=1.0, bad_share=0.0, batch_share=1.0), LIMITS, (), seed=1).next_call()
    native = npb.ClassifyRequest.FromString(NativeProtocol("car", LIMITS).prepare(call).body)
    assert list(native.texts) == list(call.texts) and native.attention == npb.ATTENTION_MODE_POOLED
    v2 = vpb.ModelInferRequest.FromString(V2Protocol("car", LIMITS).prepare(call).body)
    assert v2.inputs[0].shape == [len(call.texts), 1]
    assert [o.name for o in v2.outputs] == ["LABEL", "PROBABILITIES", "ATTENTION", "LENGTHS"]
