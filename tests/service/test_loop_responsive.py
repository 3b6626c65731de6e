"""The event loop stays responsive while a slow lone call runs.

A tiny BERT made slow on purpose (tests/service/encoder_bundles.py: 4 layers, 1024 positions)
is served on 127.0.0.1. A short text comes first, quick enough to run on the loop; then one
text of 1024 tokens asks for the attention rollout, which multiplies the layers' 1024 x 1024
maps. That call comes
alone too, but its own cost is far over what the loop may run, so it goes to a batcher
thread: a gRPC health check and an HTTP request sent while it runs answer within RESPONSIVE_S.
The machine is shared with other work, which may stall the whole server process for a moment,
so the bound holds for the median round's slowest probe: on the loop, the long call would hold
up a probe in every round.
The server runs as its own process, so that the test's client never holds the server's GIL.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2

from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from tests.service.encoder_bundles import MODEL, encoder_bundle
from tests.support import http
from tests.support.methods import CLASSIFY
from tests.support.process import ServerProcess
from tests.support.servers import free_port

RESPONSIVE_S = 0.05
LONG = " ".join(["the plot was superb and the cast was lovely"] * 200)  # cut to 1024 tokens
REPLY_BYTES = 16 * 1024 * 1024  # a 1024 x 1024 rollout is 4 MiB, over the default limit
ROUNDS = 5
PRIMING = 3  # short calls before each long one: the first may go to a thread, the rest run on the loop
PACE_S = 0.002  # between the probes: the test's own client must not crowd the server out


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, int]]:
    http_port = free_port()
    repository = encoder_bundle(tmp_path_factory.mktemp("slow-bert"), layers=4, heads=1, positions=1024)
    args = ("--http-port", str(http_port), "--max-reply-bytes", str(REPLY_BYTES))
    with ServerProcess(repository, *args) as running:
        yield running, http_port


def _seconds(probe: Callable[[], object]) -> float:
    started = time.perf_counter()
    probe()
    return time.perf_counter() - started


@pytest.mark.slow
def test_health_and_http_answer_while_a_slow_lone_call_runs(slow_server: tuple[ServerProcess, int]) -> None:
    server, port = slow_server
    short = pb.ClassifyRequest(model=MODEL, texts=["the plot was good"]).SerializeToString()
    long = pb.ClassifyRequest(model=MODEL, texts=[LONG], attention=pb.ATTENTION_MODE_ROLLOUT)
    health = health_pb2.HealthCheckRequest(service="").SerializeToString()
    rounds: list[list[tuple[float, str]]] = []  # per round: (seconds, probe) of each probe
    options = [("grpc.max_receive_message_length", REPLY_BYTES)]
    # The probes get a connection of their own: the long call's 4 MiB reply must not queue them.
    own = [("grpc.use_local_subchannel_pool", 1)]
    with (
        grpc.insecure_channel(server.target, options=options) as channel,
        grpc.insecure_channel(server.target, options=own) as probing,
    ):
        classify = channel.unary_unary(CLASSIFY, request_serializer=None, response_deserializer=None)
        check = probing.unary_unary("/grpc.health.v1.Health/Check", None, None)
        probes: dict[str, Callable[[], object]] = {
            "gRPC health": lambda: check(health, timeout=30),
            "HTTP model": lambda: http.call(port, "GET", f"/v1/models/{MODEL}"),
        }
        for probe in probes.values():
            probe()  # connections open before anything is timed
        for _ in range(ROUNDS):
            for _ in range(PRIMING):
                classify(short, timeout=30)
            running = classify.future(long.SerializeToString(), timeout=60)
            waits: list[tuple[float, str]] = []
            while not running.done():
                for name, probe in probes.items():
                    waits.append((_seconds(probe), name))
                time.sleep(PACE_S)
            reply = pb.ClassifyResponse.FromString(running.result())
            assert reply.results[0].truncated
            rounds.append(waits)
    for waits in rounds:  # each probe ran while each long call did
        assert {name for _, name in waits} == set(probes)
    slowest = sorted(max(waits) for waits in rounds)
    assert slowest[len(slowest) // 2][0] < RESPONSIVE_S, slowest
