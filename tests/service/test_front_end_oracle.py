"""One request, every front end, one answer: generated requests (texts of every length up to
each model's max_len and past it, every attention mode, top_k, attribution off, occlusion and
shapley with a budget, one to several texts) go to attnserve.v1 Classify (the project's
client), the JSON API, V2 gRPC (ModelInfer with our stubs), V2 REST (plain HTTP) and the
client's file job (`Client.classify_file`, a CSV in and out), all against one real server
serving a small transformer, the tiny BERT with an int8 label graph and a cascade of the two
kinds (the BERT as student, a small transformer trained on its reviews as teacher).

Each front end is compared with attnserve.v1 answering the request as that front end carries
it, and those must agree exactly (the file job to its six decimals). What a front end cannot
carry is left out of its request, and only the rest is compared:

- V2 has no `top_k`, no tokens (`LENGTHS` instead: their count), no offsets, no `truncated`,
  and no `ATTENTION` output for a cascade (its metadata declares none); it sends the request
  without them.
- The file job asks pooled attention or none (`with_attention`), no top_k and no attribution,
  rejects blank rows itself without a call and, when the server refuses a batch as invalid,
  classifies its rows one by one; it writes probabilities rounded to 6 places
  and, per token, the pooled attention's importance. For a cascade it asks no attention: it
  goes by the model info, which lists none.
- A cascade's model info lists no attention mode, yet Classify and the JSON API answer
  `pooled` (and top tokens) with the attention of the member that answered; the oracle asks
  them for it.

Those reduced requests are then held to the full one, the way the engine answers: the same
tokens, and the same label and probabilities where both reach the same graph (within 1e-6:
a batch without the blank texts is padded differently). The BERT answers calls without
attention or top tokens with its int8 label graph, whose scales come from each batch, and
the others with its float32 graph; wherever the int8 graph answers either request, the logits
stay within the tolerance the bundle names for it.
A cascade text near the threshold may be deferred in one batch and not in another, so the
label is held to the full request's only where the same member answered both.

The oracle compares front ends with each other, never with numbers written here: the
engine may change what it answers without breaking it. Few examples in the inner loop; CI
(CI=true) runs more.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from attnserve.export.cascade import CascadeRequest, export_cascade
from attnserve.export.cascade_threshold import member_probabilities
from attnserve.export.parity import torch_threads
from attnserve.export.writer import export_run
from attnserve.service.bundle import read_bundle
from attnserve.service.bundle.cascade import DECIDED_ON
from attnserve.service.client import Client, ClientError, ModelInfo
from attnserve.service.common.weights import importance
from attnserve.training.loop.trainer import TrainConfig
from attnserve.training.run.pipeline import DataSpec, train_run
from tests.support import http
from tests.support.cascades import NAME as CASCADE
from tests.support.cascades import set_threshold
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.tiny_bert import shared_tiny_encoder_run
from tests.support.v2 import V2Calls, output, text_request

FAMILY = "transformer"  # served alone and as the cascade's teacher
ENCODER = "bert"
MODELS = (FAMILY, ENCODER, CASCADE)

settings.register_profile(
    "front-ends", max_examples=10, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "front-ends-ci",
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
ORACLE = settings.get_profile("front-ends-ci" if os.environ.get("CI") == "true" else "front-ends")

# Words of both tasks (greetings and food; film reviews), words neither model saw, unicode the
# tokenizers split or do not know, and text a CSV has to quote.
WORDS = (
    "hello", "welcome", "folks", "howdy", "team", "neighbour", "good", "afternoon", "we", "had", "bread",
    "for", "brunch", "the", "noodles", "dinner", "was", "spicy", "apples", "breakfast", "fresh", "lunch",
    "plot", "superb", "dull", "film", "cast", "lovely", "awful", "ending", ",", ".", "!", "?", "Hello",
    "zebra", "café", "🙂", "Straße", "ﬁlm", "日本", '"quoted"', "a,b",
)  # fmt: skip
BLANKS = ("", "   ")
SAME_GRAPH_ATOL = 1e-6  # one graph, batches padded to other widths
FILE_DECIMALS = 6  # the file job's rounding (service/client/files/calls.py)
# HTTP statuses of the refusals a generated request may get, as gRPC codes.
HTTP_CODES = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}


@dataclass(frozen=True)
class Ask:
    """One request, as attnserve.v1 can express all of it."""

    texts: tuple[str, ...]
    attention: str = "none"  # or a mode's word
    top_k: int = 0
    attribution: str = "none"  # occlusion, shapley
    budget: int = 0  # shapley's coalitions per text (0: the server's default)


@dataclass
class Answer:
    """One text's answer as a front end gives it; None where that front end cannot carry it."""

    label: str
    probabilities: np.ndarray  # [C] float32 (the file job: float64, rounded)
    logits: np.ndarray | None = None
    tokens: list[str] | None = None
    length: int | None = None  # tokens the model saw
    truncated: bool | None = None
    offsets: list[tuple[int, int]] | None = None
    special: list[bool] | None = None
    attention: np.ndarray | None = None  # token axes unpadded
    top: list[tuple[int, str, float]] | None = None
    attribution: np.ndarray | None = None
    attribution_rows: int | None = None
    answered_by: str | None = None


Outcome = list[Answer] | str  # the answers, or the refusal's gRPC code name


@dataclass(frozen=True)
class Served:
    server: RunningServer
    client: Client
    v2: V2Calls
    http_port: int
    info: dict[str, ModelInfo]
    int8_tolerance: float  # the BERT's label graph: how far its logits may stray from float32
    files: Path
    counter: Iterator[int]


@pytest.fixture(scope="module")
def repository(exported_bundle: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("front-ends") / "models"
    shutil.copytree(exported_bundle(FAMILY), root / FAMILY / "1")
    encoder_run = shared_tiny_encoder_run(tmp_path_factory)
    # A generous gate: the int8 label graph is kept, so the BERT serves two graphs.
    bert = export_run(encoder_run, root, ENCODER, max_accuracy_drop=1.0)
    # The cascade of the two kinds: the BERT as student, a small transformer trained on the same
    # reviews as teacher (the suite's transformer knows other labels).
    config = TrainConfig(epochs=2, batch_size=16, lr=3e-3, progress=False, seed=0, threads=1)
    with torch_threads(1):
        teacher = train_run(
            tmp_path_factory.mktemp("teacher"),
            FAMILY,
            {"d_model": 8, "n_layers": 1, "n_heads": 2},
            config,
            DataSpec(path=str(encoder_run.parent / "reviews.csv"), seed=0),
        ).run_dir
    version = export_cascade(CascadeRequest(student=bert, teacher=teacher, repository=root, name=CASCADE))
    # The threshold at the student's median confidence on the teacher's test texts, on the graph
    # a cascade decides on: both members answer.
    lines = (teacher / "test.jsonl").read_text().splitlines()
    texts = [json.loads(line)["text"] for line in lines if line.strip()]
    student = read_bundle(version / "student")
    confidences = member_probabilities(student.root, student.manifest, texts, DECIDED_ON).max(axis=1)
    set_threshold(version, float(np.median(confidences)))
    return root


@pytest.fixture(scope="module")
def served(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    manifest = read_bundle(repository / ENCODER / "1").manifest
    graph = manifest.label_graph
    assert graph is not None and graph.quantization is not None and graph.quantization.tolerance is not None
    with (
        RunningServer(make_settings(repository, http_port=free_port())) as server,
        Client(server.target, timeout=60) as client,
    ):
        assert server.server is not None
        v2 = V2Calls(server.target)
        try:
            yield Served(
                server,
                client,
                v2,
                server.server.http_port,
                {name: client.model(name) for name in MODELS},
                graph.quantization.tolerance,
                tmp_path_factory.mktemp("file-jobs"),
                itertools.count(),
            )
        finally:
            v2.close()


# --- the requests -------------------------------------------------------------------------


def modes_of(info: ModelInfo) -> list[str]:
    """The attention modes a model answers. A cascade's model info lists none (V2 declares no
    ATTENTION for it either), yet Classify answers `pooled` with the answering member's."""
    if info.family == "cascade":
        return ["pooled"]
    return [mode.word for mode in info.attention.modes]


@st.composite
def asks(draw: st.DrawFn, info: ModelInfo) -> Ask:
    max_len = info.max_len
    words = st.one_of(
        st.integers(1, 6),  # short
        st.integers(max(1, max_len - 6), max_len + 6),  # around max_len (in tokens, for the word models)
        st.integers(max_len, 2 * max_len),  # cut (truncation: head)
    ).flatmap(lambda n: st.lists(st.sampled_from(WORDS), min_size=n, max_size=n))
    text = words.map(" ".join)
    texts = draw(st.lists(st.one_of(text, text, text, text, st.sampled_from(BLANKS)), min_size=1, max_size=4))
    attribution = draw(st.sampled_from(["none", "none", "occlusion", "shapley"]))
    # Shapley's budget: the default, or one that may be under words + 1 (refused alike everywhere).
    budget = draw(st.one_of(st.just(0), st.integers(2, 80))) if attribution == "shapley" else 0
    return Ask(
        texts=tuple(texts),
        attention=draw(st.sampled_from(["none", *modes_of(info)])),
        top_k=draw(st.integers(0, 4)),
        attribution=attribution,
        budget=budget,
    )


def for_v2(ask: Ask, cascade: bool) -> Ask:
    """What V2 carries of `ask`: no top_k; for a cascade, no attention."""
    return replace(ask, top_k=0, attention="none" if cascade else ask.attention)


def for_file(ask: Ask, cascade: bool) -> Ask:
    """What the file job asks: its non-blank texts, pooled attention or none (none for a
    cascade: the job goes by the model info, which lists no attention), nothing else."""
    texts = tuple(text for text in ask.texts if text.strip())
    return Ask(texts, attention="none" if ask.attention == "none" or cascade else "pooled")


# --- the front ends -----------------------------------------------------------------------


def native(served: Served, model: str, ask: Ask) -> Outcome:
    try:
        reply = served.client.classify(
            list(ask.texts),
            model=model,
            attention=ask.attention,
            top_k=ask.top_k,
            attribution=ask.attribution,
            attribution_budget=ask.budget,
        )
    except ClientError as exc:
        return exc.code.name
    return [
        Answer(
            label=r.label,
            probabilities=np.asarray(r.probabilities, np.float32),
            logits=np.asarray(r.logits, np.float32),
            tokens=list(r.tokens),
            length=len(r.tokens),
            truncated=r.truncated,
            offsets=[(int(start), int(end)) for start, end in r.offsets],
            special=list(r.special),
            attention=r.attention,
            top=[(t.index, t.token, t.weight) for t in r.top_tokens],
            attribution=r.attribution,
            attribution_rows=r.attribution_rows if ask.attribution != "none" else None,
            answered_by=r.answered_by,
        )
        for r in reply.results
    ]


def json_api(served: Served, model: str, ask: Ask) -> Outcome:
    document = {
        "texts": list(ask.texts),
        "attention": ask.attention,
        "top_k": ask.top_k,
        "attribution": ask.attribution,
        "attribution_budget": ask.budget,
    }
    reply = http.classify(served.http_port, model, document)
    if reply.status != 200:
        return reply.error["code"]
    answers = []
    for r in reply.json()["results"]:
        attribution = r.get("attribution")
        answers.append(
            Answer(
                label=r["label"],
                probabilities=np.asarray(r["probabilities"], np.float32),
                logits=np.asarray(r["logits"], np.float32),
                tokens=r["tokens"],
                length=len(r["tokens"]),
                truncated=r["truncated"],
                offsets=[(start, end) for start, end in r["offsets"]],
                special=r["special"],
                attention=None if r.get("attention") is None else np.asarray(r["attention"], np.float32),
                top=[(t["index"], t["token"], t["weight"]) for t in r.get("top_tokens", [])],
                attribution=None if attribution is None else np.asarray(attribution, np.float32),
                attribution_rows=r.get("attribution_rows") if ask.attribution != "none" else None,
                answered_by=r.get("answered_by", ""),
            )
        )
    return answers


def v2_outputs(ask: Ask, cascade: bool) -> list[str]:
    names = ["LABEL", "PROBABILITIES", "LOGITS", "LENGTHS"]
    names += ["ATTENTION"] if ask.attention != "none" else []  # naming it would compute pooled attention
    names += ["ATTRIBUTION", "ATTRIBUTION_ROWS"] if ask.attribution != "none" else []
    return names + (["ANSWERED_BY"] if cascade else [])


def v2_parameters(ask: Ask) -> dict[str, str | int]:
    values: dict[str, str | int] = {}
    if ask.attention != "none":
        values["attention_mode"] = ask.attention
    if ask.attribution != "none":
        values["attribution"] = ask.attribution
        values["attribution_budget"] = ask.budget
    return values


def v2_answers(tensors: dict[str, np.ndarray], ask: Ask) -> list[Answer]:
    """Per text, from V2's batch tensors; token axes cut to the text's LENGTHS, and the padding
    past them must be zeros."""
    answers = []
    for i, length in enumerate(tensors["LENGTHS"].tolist()):
        answer = Answer(
            label=str(tensors["LABEL"][i][0]),
            probabilities=np.asarray(tensors["PROBABILITIES"][i], np.float32),
            logits=np.asarray(tensors["LOGITS"][i], np.float32),
            length=int(length),
        )
        if "ATTENTION" in tensors:
            row = tensors["ATTENTION"][i]  # [T] for pooling models, else [..., T, T]
            answer.attention = _unpad(row, int(length), 1 if row.ndim == 1 else 2)
        if "ATTRIBUTION" in tensors:
            answer.attribution = _unpad(tensors["ATTRIBUTION"][i], int(length), 1)
            answer.attribution_rows = int(tensors["ATTRIBUTION_ROWS"][i])
        if "ANSWERED_BY" in tensors:
            answer.answered_by = str(tensors["ANSWERED_BY"][i][0])
        answers.append(answer)
    return answers


def _unpad(row: np.ndarray, length: int, axes: int) -> np.ndarray:
    """`row` with its last `axes` axes (the token axes, as long as the request's longest text)
    cut to the text's `length`; what lies past it must be zeros."""
    cut = (*(slice(None),) * (row.ndim - axes), *(slice(0, length),) * axes)
    rest = np.array(row, copy=True)
    rest[cut] = 0
    assert not rest.any(), f"padding past {length} tokens is not zero"
    return np.asarray(row[cut], np.float32)


def v2_grpc(served: Served, model: str, ask: Ask) -> Outcome:
    cascade = served.info[model].family == "cascade"
    names = v2_outputs(ask, cascade)
    request = text_request(model, list(ask.texts), outputs=names)
    for name, value in v2_parameters(ask).items():
        if isinstance(value, str):
            request.parameters[name].string_param = value
        else:
            request.parameters[name].int64_param = value
    try:
        reply = served.v2.infer(request)
    except grpc.RpcError as exc:
        return str(exc.code().name)
    assert [tensor.name for tensor in reply.outputs] == names
    return v2_answers({name: output(reply, name) for name in names}, ask)


_REST_DTYPES = {"FP32": np.float32, "INT64": np.int64, "INT32": np.int32, "BYTES": object}


def v2_rest(served: Served, model: str, ask: Ask) -> Outcome:
    cascade = served.info[model].family == "cascade"
    names = v2_outputs(ask, cascade)
    document: dict[str, Any] = {
        "inputs": [
            {"name": "TEXT", "datatype": "BYTES", "shape": [len(ask.texts), 1], "data": list(ask.texts)}
        ],
        "outputs": [{"name": name} for name in names],
    }
    if v2_parameters(ask):
        document["parameters"] = v2_parameters(ask)
    reply = http.call(served.http_port, "POST", f"/v2/models/{model}/infer", document)
    if reply.status != 200:
        return HTTP_CODES.get(reply.status, f"HTTP {reply.status}")
    tensors = {
        o["name"]: np.asarray(o["data"], dtype=_REST_DTYPES[o["datatype"]]).reshape(o["shape"])
        for o in reply.json()["outputs"]
    }
    assert list(tensors) == names
    return v2_answers(tensors, ask)


def file_job(
    served: Served, model: str, texts: tuple[str, ...], with_attention: bool
) -> tuple[list[Answer], dict[int, str]]:
    """The file job over a CSV of `texts` (blank ones included): the answers of the rows it
    wrote, in order, and the rows it rejected with the reason."""
    folder = served.files / str(next(served.counter))
    folder.mkdir()
    source, target = folder / "texts.csv", folder / "out.csv"
    with source.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "text"])
        writer.writerows(enumerate(texts))
    report = served.client.classify_file(
        source, target, model=model, with_attention=with_attention, workers=1, progress_every=3600.0
    )
    assert report.stopped is None, report
    labels = served.info[model].labels
    answers = []
    with target.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        answer = Answer(
            label=row["label"],
            probabilities=np.asarray([float(row[f"p_{label}"]) for label in labels]),
            answered_by=row.get("answered_by"),
        )
        if with_attention:
            answer.tokens = json.loads(row["tokens"])
            answer.attention = np.asarray(json.loads(row["attention"]))
        answers.append(answer)
    rejects = target.with_name(target.name + ".rejects.jsonl")
    rejected = [json.loads(line) for line in rejects.read_text().splitlines()] if rejects.exists() else []
    kept = [int(row["id"]) for row in rows]
    assert sorted(kept + [entry["row"] for entry in rejected]) == list(range(len(texts))), (kept, rejected)
    return answers, {entry["row"]: entry["reason"] for entry in rejected}


# --- the comparisons ----------------------------------------------------------------------


def same(expected: Outcome, got: Outcome, where: str) -> None:
    """`got` (a front end) carries exactly what `expected` (attnserve.v1, same request) says,
    in every field it carries."""
    if isinstance(expected, str) or isinstance(got, str):
        assert got == expected, f"{where}: {got!r}, attnserve.v1: {expected!r}"
        return
    assert len(got) == len(expected), where
    for i, (theirs, ours) in enumerate(zip(got, expected, strict=True)):
        at = f"{where}, text {i}"
        assert theirs.label == ours.label, at
        np.testing.assert_array_equal(theirs.probabilities, ours.probabilities, err_msg=at)
        for name in ("logits", "attention", "attribution"):
            value = getattr(theirs, name)
            if value is not None:
                reference = getattr(ours, name)
                assert reference is not None, f"{at}: {name} not in attnserve.v1's reply"
                np.testing.assert_array_equal(value, reference, err_msg=f"{at}: {name}")
        for name in ("tokens", "length", "truncated", "offsets", "special", "top", "attribution_rows",
                     "answered_by"):  # fmt: skip
            value = getattr(theirs, name)
            if value is not None:
                assert value == getattr(ours, name), f"{at}: {name}"


def same_file(expected: Outcome, got: Outcome, where: str) -> None:
    """The file job's rows: attnserve.v1's answers as the job writes them (6 decimals)."""
    assert not isinstance(expected, str), f"{where}: attnserve.v1 refused the file's texts: {expected}"
    assert not isinstance(got, str)
    assert len(got) == len(expected), where
    for i, (theirs, ours) in enumerate(zip(got, expected, strict=True)):
        at = f"{where}, row {i}"
        assert theirs.label == ours.label, at
        rounded = [round(float(p), FILE_DECIMALS) for p in ours.probabilities]
        assert theirs.probabilities.tolist() == rounded, at
        assert (theirs.answered_by or "") == ours.answered_by, at
        if theirs.tokens is not None:
            assert theirs.tokens == ours.tokens, at
            assert ours.attention is not None and theirs.attention is not None, at
            weights = [round(float(w), FILE_DECIMALS) for w in importance(ours.attention)]
            assert theirs.attention.tolist() == weights, at


def explains(ask: Ask) -> bool:
    """Whether a call reaches an encoder's float32 graph rather than its label graph: one
    with attention or top tokens (tests/service/engine/models/test_two_graphs.py)."""
    return ask.attention != "none" or ask.top_k > 0


def held_to_full(
    served: Served, model: str, full: Ask, full_out: Outcome, part: Ask, part_out: Outcome
) -> None:
    """A front end's reduced request (`part`) against the full one, as the engine answers both:
    its texts' tokens the same, the label and probabilities of the same graph the same."""
    if isinstance(full_out, str) or isinstance(part_out, str):
        # Only what the reduced request dropped can refuse: top_k, attention or attribution.
        assert isinstance(full_out, str) or part_out == full_out, (full_out, part_out)
        return
    texts = {text: i for i, text in reversed(list(enumerate(full.texts)))}
    # The label graph is int8 with scales from each batch's activations: its logits move with
    # the batch (tests/service/engine/models/test_two_graphs.py) as well as across graphs.
    int8 = served.info[model].label_graph != "" and not (explains(full) and explains(part))
    for text, ours in zip(part.texts, part_out, strict=True):
        theirs = full_out[texts[text]]
        at = f"{model}: {text[:40]!r} of {part} against {full}"
        assert ours.tokens == theirs.tokens and ours.truncated == theirs.truncated, at
        if ours.answered_by != theirs.answered_by:
            continue  # a cascade text at the threshold: each member's answer is checked above
        assert ours.logits is not None and theirs.logits is not None
        if int8:
            np.testing.assert_allclose(
                ours.logits, theirs.logits, rtol=0, atol=served.int8_tolerance, err_msg=at
            )
        else:
            assert ours.label == theirs.label, at
            np.testing.assert_allclose(ours.probabilities, theirs.probabilities, rtol=0, atol=SAME_GRAPH_ATOL,
                                       err_msg=at)  # fmt: skip


def what_it_covers(outcome: Outcome) -> set[str]:
    if isinstance(outcome, str):
        return {f"refused: {outcome}"}
    covered = {"answered"}
    covered |= {"truncated" for answer in outcome if answer.truncated}
    covered |= {f"answered by the {answer.answered_by}" for answer in outcome if answer.answered_by}
    covered |= {"attribution of 0 rows" for answer in outcome if answer.attribution_rows == 0}
    return covered


def check_every_front_end(served: Served, model: str, ask: Ask) -> None:
    cascade = served.info[model].family == "cascade"
    replies: dict[Ask, Outcome] = {}

    def v1(request: Ask) -> Outcome:
        if request not in replies:
            replies[request] = native(served, model, request)
        return replies[request]

    full = v1(ask)
    for what in what_it_covers(full):
        event(what)  # shown by --hypothesis-show-statistics: what the examples reached
    same(full, json_api(served, model, ask), f"{model}: the JSON API")

    v2_ask = for_v2(ask, cascade)
    same(v1(v2_ask), v2_grpc(served, model, v2_ask), f"{model}: V2 gRPC")
    same(v1(v2_ask), v2_rest(served, model, v2_ask), f"{model}: V2 REST")
    held_to_full(served, model, ask, full, v2_ask, v1(v2_ask))

    # The file job rejects blank rows itself, with no call, and classifies the others in one
    # call; when the server refuses that call as invalid, it sends each row alone and rejects
    # the rows refused alone, with the server's reason.
    file_ask = for_file(ask, cascade)
    rows, rejected = file_job(served, model, ask.texts, file_ask.attention != "none")
    blank = [i for i, text in enumerate(ask.texts) if not text.strip()]
    assert all(rejected[i].startswith("no text") for i in blank), rejected
    whole = v1(file_ask) if file_ask.texts else []
    if not isinstance(whole, str):
        assert sorted(rejected) == blank, rejected
        same_file(whole, rows, f"{model}: the file job")
        held_to_full(served, model, ask, full, file_ask, whole)
        return
    assert whole == "INVALID_ARGUMENT", whole  # the only refusal the job's requests can get
    alone = {i: v1(Ask((text,), file_ask.attention)) for i, text in enumerate(ask.texts) if i not in blank}
    refused = {i: code for i, code in alone.items() if isinstance(code, str)}
    assert sorted(rejected) == sorted([*blank, *refused]), (rejected, refused)
    assert all(rejected[i].startswith(f"{code}: ") for i, code in refused.items()), rejected
    answered = [answer[0] for answer in alone.values() if not isinstance(answer, str)]
    same_file(answered, rows, f"{model}: the file job, row by row")


# --- the oracle ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
@ORACLE
@given(data=st.data())
def test_every_front_end_gives_the_same_answer(served: Served, model: str, data: st.DataObject) -> None:
    check_every_front_end(served, model, data.draw(asks(served.info[model]), label="request"))
