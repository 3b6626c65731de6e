"""A long text's windows go through the version's own batcher: no batch is over the server's
token budget, and a deadline that passes mid-document drops the windows not yet run. A long
text within the limits is read whole on every front end, and one over them is refused with
its status there, never a 5xx. A tiny BERT classifier made with transformers, imported with
windows of 16 tokens, served on 127.0.0.1 with a budget of 64 padded tokens (four windows a
batch).
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import grpc
import pytest

from attnserve.export.cli import main as export_main
from attnserve.service.bundle import MANIFEST_FILE, STAGING_PREFIX
from attnserve.service.client import Client, ClientError
from tests.export.hf_classifiers import ARCHITECTURES, save_classifier, texts
from tests.service.test_workers import OWN_CONNECTION, children, wait_ready
from tests.support import http
from tests.support.process import ServerProcess
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.v2 import V2Calls, output, text_request
from tests.support.waits import eventually

NAME, WINDOW, STRIDE, BUDGET = "windows-budget", 16, 4, 64
TEN_WINDOWS = " ".join(texts(12, seed=5))
HUNDREDS = " ".join(texts(600, seed=6))  # several hundred windows, 22,400 characters
MAX_CHARS, MAX_BODY = 30_000, 100_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = save_classifier(ARCHITECTURES["bert"], tmp_path_factory.mktemp("budget") / "hf", seed=3)
    repository = tmp_path_factory.mktemp("budget-models")
    argv = [str(folder), "--repository", str(repository), "--name", NAME, "--max-len", str(WINDOW),
            "--no-latency", "--quantize", "none", "--long-texts", "windows", "--stride", str(STRIDE),
            "--max-windows", "4096"]  # fmt: skip
    assert export_main(argv) == 0
    limits = {"max_batch_tokens": BUDGET, "max_text_chars": MAX_CHARS, "http_max_body_bytes": MAX_BODY}
    settings = make_settings(repository, long_text="windows", http_port=free_port(), **limits)
    with RunningServer(settings) as running:
        yield running


def _batches(server: RunningServer, *, under: float | None = None) -> float:
    """Batches run so far (`under`: those whose padded tokens were at most that many)."""
    if under is None:
        return server.value("attnserve_batch_tokens_count", model=NAME)
    return server.value("attnserve_batch_tokens_bucket", model=NAME, le=f"{under}")


def test_no_batch_of_a_documents_windows_is_over_the_token_budget(server: RunningServer) -> None:
    before, within_before = _batches(server), _batches(server, under=float(BUDGET))
    with Client(server.target, timeout=30) as client:
        result = client.classify(TEN_WINDOWS, model=NAME).results[0]
    windows = len(result.windows)
    assert windows >= 8
    ran = _batches(server) - before
    assert ran >= math.ceil(windows / (BUDGET // WINDOW))  # the windows were split into batches
    assert _batches(server, under=float(BUDGET)) - within_before == ran  # every one within the budget


def test_a_deadline_passing_mid_document_drops_the_windows_not_yet_run(server: RunningServer) -> None:
    dropped_before = server.value("attnserve_deadline_dropped_total", model=NAME)
    with Client(server.target, timeout=30) as client:
        count = len(client.classify(HUNDREDS, model=NAME).results[0].windows)
        assert count >= 300
        before = _batches(server)
        with pytest.raises(ClientError) as refused:
            client.classify(HUNDREDS, model=NAME, timeout=0.05)
        assert refused.value.code is grpc.StatusCode.DEADLINE_EXCEEDED
        # The server is answering again, and it ran only some of the document's batches.
        assert len(client.classify("the film was good", model=NAME).results) == 1
    ran = _batches(server) - before - 1  # less the short call's batch
    dropped = server.value("attnserve_deadline_dropped_total", model=NAME) - dropped_before
    assert dropped > 0, "no window was dropped when the deadline passed"
    assert ran < math.ceil(count / (BUDGET // WINDOW)), f"all {ran} batches ran after the deadline"


def _v2_rest(port: int, text: str) -> http.Reply:
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [text]}]}
    return http.call(port, "POST", f"/v2/models/{NAME}/infer", body)


def test_every_front_end_reads_a_long_text_whole_and_refuses_one_over_the_limits(
    server: RunningServer,
) -> None:
    port = server.server.http_port if server.server else 0
    over = (HUNDREDS + " ") * 2  # over max_text_chars, within every message and body limit
    with Client(server.target, timeout=30) as client:
        count = len(client.classify(HUNDREDS, model=NAME).results[0].windows)
        with pytest.raises(ClientError) as chars:
            client.classify(over, model=NAME)
    assert (
        chars.value.code is grpc.StatusCode.INVALID_ARGUMENT
        and f"limit is {MAX_CHARS}" in chars.value.details
    )
    reply = http.classify(port, NAME, {"texts": [HUNDREDS]})
    assert reply.status == 200 and len(reply.json()["results"][0]["windows"]) == count
    refused = http.classify(port, NAME, {"texts": [over]})
    assert refused.status == 400 and f"limit is {MAX_CHARS}" in refused.error["message"]
    calls = V2Calls(server.target)
    try:
        table = output(calls.infer(text_request(NAME, [HUNDREDS])), "WINDOWS")
        assert table.shape == (1, count, 3)
        with pytest.raises(grpc.RpcError) as v2_chars:
            calls.infer(text_request(NAME, [over]))
        assert v2_chars.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    finally:
        calls.close()
    rest = _v2_rest(port, HUNDREDS)
    assert rest.status == 200, rest.body
    assert {o["name"] for o in rest.json()["outputs"]} >= {"PROBABILITIES", "WINDOWS"}
    assert _v2_rest(port, over).status == 400
    # A body over the 64 KiB a request head may take, sent in one piece, is a body, not a head.
    large = http.classify(port, NAME, {"texts": [HUNDREDS] * 4, "long_text": "truncate"})
    assert large.status == 200 and len(large.json()["results"]) == 4
    # Past the HTTP body limit: 413 on both HTTP front ends, before any text is read.
    huge = "the film " * (MAX_BODY // 9 + 1)
    assert http.classify(port, NAME, {"texts": [huge]}).status == 413
    assert _v2_rest(port, huge).status == 413


def _serves(client: Client, version: int) -> bool:
    return client.model(NAME).version == version


def test_a_reload_mid_document_answers_every_window_from_the_version_it_began_on(
    server: RunningServer, tmp_path: Path
) -> None:
    """A new version (windows sharing no tokens where the last shared STRIDE, or the other way
    round) is published while four documents of hundreds of windows, one window a batch, run
    on the version before it; that call's windows are its version's to the end, and the next
    call reads the new version's. Tried again with the next version where the call ended
    before the new version was served (nothing tested then), at most four times."""
    root = tmp_path / "models"
    shutil.copytree(server.settings.repository / NAME, root / NAME)
    limits = {"max_batch_tokens": WINDOW, "max_queue": 4096, "max_text_chars": MAX_CHARS}
    settings = make_settings(root, long_text="windows", repository_poll_seconds=0.05, **limits)
    documents = [HUNDREDS] * 4
    with (
        RunningServer(settings) as running,
        Client(running.target, timeout=60) as client,
        ThreadPoolExecutor(1) as pool,
    ):
        for version in range(2, 6):
            first = pool.submit(client.classify, documents, model=NAME)
            staging = root / NAME / f"{STAGING_PREFIX}{version}"
            shutil.copytree(root / NAME / str(version - 1), staging)
            data = json.loads((staging / MANIFEST_FILE).read_text())
            data["version"], data["long_texts"]["stride"] = version, 0 if version % 2 == 0 else STRIDE
            (staging / MANIFEST_FILE).write_text(json.dumps(data))
            staging.rename(root / NAME / str(version))
            assert eventually(partial(_serves, client, version), timeout=30)
            in_flight = not first.done()
            old = first.result(timeout=60)
            new = client.classify(HUNDREDS, model=NAME)
            if in_flight:
                break
    assert in_flight, "each call ended before the next version was served: nothing was tested"
    assert (old.version, new.version) == (version - 1, version)
    for reply in (old, new):  # odd versions' windows share tokens, even versions' do not
        for result in reply.results:
            overlap = any(b.start < a.end for a, b in itertools.pairwise(result.windows))
            assert overlap == (reply.version % 2 == 1)


def test_every_worker_of_a_multi_process_server_reads_windows_alike(server: RunningServer) -> None:
    with Client(server.target, timeout=30) as client:
        want = client.classify(TEN_WINDOWS, model=NAME).results[0]
    args = ("--workers", "2", "--long-text", "windows", "--max-batch-tokens", str(BUDGET))
    with ServerProcess(server.settings.repository, *args) as served:
        workers = children(served.pid)
        for pid in workers:
            wait_ready(served, pid, 60)
        answered = []
        for _ in range(6):  # fresh connections spread over the workers
            with Client(served.target, timeout=30, options=OWN_CONNECTION) as client:
                answered.append(client.classify(TEN_WINDOWS, model=NAME).results[0])
        assert children(served.pid) == workers, served.output
    for got in answered:
        assert [(w.start, w.end) for w in got.windows] == [(w.start, w.end) for w in want.windows]
        assert got.probabilities == pytest.approx(want.probabilities, abs=1e-6)
