"""A served cascade sends the teacher exactly the texts its student is unsure of, and says so."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from attnserve.export.cascade_threshold import member_probabilities
from attnserve.service.bundle import read_bundle
from attnserve.service.client import Client, ClientError
from tests.support import http
from tests.support.cascades import NAME, STUDENT_FAMILY, export_duo, serve_alone, set_threshold
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.v2 import V2Calls, output, text_request

TEXTS = 24


@dataclass(frozen=True)
class Served:
    server: RunningServer
    client: Client
    student: str
    teacher: str
    texts: list[str]
    threshold: float


@pytest.fixture(scope="module")
def served(trained_run: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("cascade-models")
    version = export_duo(trained_run, root)
    student, teacher = serve_alone(version, root, "student"), serve_alone(version, root, "teacher")
    lines = (trained_run(STUDENT_FAMILY) / "test.jsonl").read_text().splitlines()
    texts = [json.loads(line)["text"] for line in lines if line.strip()][:TEXTS]
    # A threshold in the widest gap between the middle half's confidences, so both members
    # answer some texts and no confidence lies near enough to it for a rounding to move the text.
    bundle = read_bundle(version / "student")
    top = np.sort(member_probabilities(bundle.root, bundle.manifest, texts).max(axis=1))
    quarter = len(top) // 4
    gaps = np.diff(top[quarter : len(top) - quarter])
    low = quarter + int(gaps.argmax())
    threshold = float((top[low] + top[low + 1]) / 2)
    assert top[low + 1] - top[low] > 1e-5, "the texts need two distinct middle confidences"
    set_threshold(version, threshold)
    with (
        RunningServer(make_settings(root, http_port=free_port())) as server,
        Client(server.target, timeout=30) as client,
    ):
        yield Served(server, client, student, teacher, texts, threshold)


def test_native_defers_the_unsure_texts(served: Served) -> None:
    client, texts = served.client, served.texts
    alone = client.classify(texts, model=served.student).results
    teacher = client.classify(texts, model=served.teacher).results
    reply = client.classify(texts, model=NAME)
    assert (reply.model, reply.version) == (NAME, 1)
    before = served.server.value("attnserve_cascade_texts_total", model=NAME, member="teacher")
    expected = ["teacher" if r.probabilities.max() < served.threshold else "student" for r in alone]
    assert [r.answered_by for r in reply.results] == expected
    assert {"student", "teacher"} <= set(expected)
    for got, mine, theirs, member in zip(reply.results, alone, teacher, expected, strict=True):
        source = mine if member == "student" else theirs
        assert got.label == source.label
        np.testing.assert_allclose(got.probabilities, source.probabilities, atol=1e-5)
        assert got.tokens == source.tokens  # the tokens of the member that answered
    assert all(r.answered_by == "" for r in alone)
    client.classify(texts, model=NAME)
    after = served.server.value("attnserve_cascade_texts_total", model=NAME, member="teacher")
    assert after - before == expected.count("teacher")


def test_json_api_says_who_answered(served: Served) -> None:
    alone = served.client.classify(served.texts, model=served.student).results
    assert served.server.server is not None
    port = served.server.server.http_port
    reply = http.classify(port, NAME, {"texts": served.texts})
    assert reply.status == 200, reply.body
    results = reply.json()["results"]
    expected = ["teacher" if r.probabilities.max() < served.threshold else "student" for r in alone]
    assert [r["answered_by"] for r in results] == expected
    plain = http.classify(port, served.student, {"texts": served.texts[:1]})
    assert plain.json()["results"][0].get("answered_by") is None


def test_attention_comes_from_the_member_that_answered(served: Served) -> None:
    # The student pools ([n]) and the teacher attends token to token ([n, n]): each text's
    # map has its own member's shape and values.
    client, texts = served.client, served.texts
    mine = client.classify(texts, model=served.student, attention="pooled", top_k=2).results
    theirs = client.classify(texts, model=served.teacher, attention="pooled", top_k=2).results
    reply = client.classify(texts, model=NAME, attention="pooled", top_k=2).results
    assert {r.answered_by for r in reply} == {"student", "teacher"}
    for got, student, teacher in zip(reply, mine, theirs, strict=True):
        source = student if got.answered_by == "student" else teacher
        assert got.attention is not None and source.attention is not None
        assert got.attention.shape == source.attention.shape
        np.testing.assert_allclose(got.attention, source.attention, atol=1e-5)
        assert [t.token for t in got.top_tokens] == [t.token for t in source.top_tokens]
    # A mode one member lacks is refused before any work.
    with pytest.raises(ClientError) as refused:
        client.classify(texts[:2], model=NAME, attention="all")
    assert refused.value.code.name == "INVALID_ARGUMENT"


def _expected(served: Served) -> list[str]:
    alone = served.client.classify(served.texts, model=served.student).results
    return ["teacher" if r.probabilities.max() < served.threshold else "student" for r in alone]


def test_v2_grpc_declares_and_returns_answered_by(served: Served) -> None:
    calls = V2Calls(served.server.target)
    try:
        reply = calls.infer(text_request(NAME, served.texts))
        answered = output(reply, "ANSWERED_BY")
        assert answered.shape == (len(served.texts), 1)
        assert answered[:, 0].tolist() == _expected(served)
        plain = calls.infer(text_request(served.student, served.texts[:1]))
        assert "ANSWERED_BY" not in [tensor.name for tensor in plain.outputs]
    finally:
        calls.close()


def test_v2_rest_returns_answered_by(served: Served) -> None:
    assert served.server.server is not None
    port = served.server.server.http_port
    metadata = http.call(port, "GET", f"/v2/models/{NAME}").json()
    assert {"name": "ANSWERED_BY", "datatype": "BYTES", "shape": [-1, 1]} in metadata["outputs"]
    document = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(served.texts), 1],
                            "data": served.texts}]}  # fmt: skip
    reply = http.call(port, "POST", f"/v2/models/{NAME}/infer", document)
    assert reply.status == 200, reply.body
    (tensor,) = [t for t in reply.json()["outputs"] if t["name"] == "ANSWERED_BY"]
    assert tensor["data"] == _expected(served)
