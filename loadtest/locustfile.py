"""Locust load test of attnserve over gRPC: `NativeUser` (attnserve.v1 Classify) and `V2User`
(inference.GRPCInferenceService ModelInfer).

    locust -f loadtest/locustfile.py --headless --host 127.0.0.1:50051 --users 32 --spawn-rate 8 \
        --run-time 60s --stop-timeout 30 --metrics 127.0.0.1:9100 --csv reports/attnserve
    python -m loadtest --target 127.0.0.1:50051 --duration 60s     # the same, with defaults

Each call is drawn from a seeded mix (loadtest/workload.py): sentence lengths, batches of
texts, attention on/off, deadlines, and a share of deliberately bad requests. A bad request
answered with its documented status is an *expected error*: a success in Locust's statistics
(request type `<api> expected-error`) and counted apart in the ledger; any other status is a
failure. `--loop open` sends at a constant arrival rate (`--rate` calls/s over all users)
whatever the latency; `--loop closed` (default) has each user wait for its reply.

With `--metrics HOST:PORT` the server's attnserve_requests_total is scraped before and after
the run and reconciled with the client's counts; a mismatch makes locust exit with status 3.
"""

from __future__ import annotations

import random
import sys
import time
import weakref
from pathlib import Path
from typing import Any

from grpc.experimental import gevent as grpc_gevent  # type: ignore[attr-defined]

# grpc's core must poll through gevent's hub, or a blocking call freezes every simulated user.
grpc_gevent.init_gevent()

import gevent  # noqa: E402
import grpc  # noqa: E402
from gevent.pool import Group  # noqa: E402
from locust import User, events, task  # noqa: E402
from locust.env import Environment  # noqa: E402

if __package__ in (None, ""):  # run by locust as a file: make the `loadtest` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kit.v2 import MODEL_INFER  # noqa: E402
from loadtest.options import add_options  # noqa: E402
from loadtest.protocol import NATIVE_METHOD, WireProtocol  # noqa: E402
from loadtest.session import LoadRun  # noqa: E402
from loadtest.workload import Call  # noqa: E402

EXIT_MISMATCH = 3
# Statuses any call can get under load or shutdown, bad or not: failures, never a wrong answer.
LOAD_CODES = frozenset({"DEADLINE_EXCEEDED", "CANCELLED", "RESOURCE_EXHAUSTED", "UNAVAILABLE"})
_RUNS: weakref.WeakKeyDictionary[Environment, LoadRun] = weakref.WeakKeyDictionary()


def _test_start(environment: Environment, **_: Any) -> None:
    options = environment.parsed_options
    if options is None or not environment.host:
        raise SystemExit("the load test needs --host (the server's host:port)")
    run = LoadRun(options, environment.host)
    try:
        run.start()
    except grpc.RpcError as error:  # one line, not a traceback per simulated user
        code = error.code().name if isinstance(error, grpc.Call) else "UNKNOWN"
        details = error.details() if isinstance(error, grpc.Call) else str(error)
        where = environment.host
        raise SystemExit(f"loadtest: cannot start: GetModel at {where}: {code}: {details}") from None
    _RUNS[environment] = run


def _test_stop(environment: Environment, **_: Any) -> None:
    run = _RUNS.pop(environment, None)
    if run is None:
        return
    result = run.finish(getattr(environment.parsed_options, "csv_prefix", None))
    if result is not None and not result.ok:
        environment.process_exit_code = EXIT_MISMATCH


def _init(**_: Any) -> None:
    # gevent's loop caches "now" and has not run during the imports; locust times --run-time
    # from that cached value, so on a busy machine a run whose imports took longer than its
    # duration ended before its first call. Refresh the clock before locust sets the timer.
    gevent.get_hub().loop.update_now()


events.init.add_listener(_init)  # type: ignore[no-untyped-call]
events.init_command_line_parser.add_listener(add_options)  # type: ignore[no-untyped-call]
events.test_start.add_listener(_test_start)  # type: ignore[no-untyped-call]
events.test_stop.add_listener(_test_stop)  # type: ignore[no-untyped-call]


class StatusError(Exception):
    """A call answered with a status other than the one it should get (message: bounded)."""


class GrpcUser(User):
    abstract = True
    api = ""
    method = ""

    def on_start(self) -> None:
        self.load = _RUNS[self.environment]
        self.protocol: WireProtocol = self.load.protocol(self.api)
        self.workload = self.load.workload(self.protocol)
        self.rpc = self.load.call(id(self), self.method)
        self.pending = Group()
        options = self.load.options
        users = max(1, options.num_users or 1)
        self.interval = users / options.rate if options.rate > 0 else 1.0
        self.inflight_limit = max(1, options.max_inflight // users)
        # Users start spread over one interval, so arrivals do not come in bursts of `users`.
        self.next_at = time.monotonic() + random.uniform(0.0, self.interval)

    def wait_time(self) -> float:
        options = self.load.options
        if options.loop == "closed":
            return float(options.think_time)
        self.next_at += self.interval  # a fixed schedule: late arrivals are sent at once, not skipped
        return max(0.0, self.next_at - time.monotonic())

    @task
    def classify(self) -> None:
        call = self.workload.next_call()
        if self.load.options.loop == "closed":
            self.invoke(call)
        elif len(self.pending) >= self.inflight_limit:
            self.load.ledger.not_sent[self.api] += 1
        else:
            self.pending.spawn(self.invoke, call)

    def invoke(self, call: Call) -> None:
        prepared = self.protocol.prepare(call)
        ledger = self.load.ledger
        timeout = call.deadline_s if call.deadline_s is not None else self.load.options.timeout
        ledger.open(self.api)
        started = time.perf_counter()
        reply = b""
        try:
            reply = self.rpc(prepared.body, timeout=timeout)
            code = "OK"
        except grpc.RpcError as error:
            code = error.code().name if isinstance(error, grpc.Call) else "UNKNOWN"
        elapsed_ms = (time.perf_counter() - started) * 1000
        ledger.close(self.api, code)
        request_type, exception = self.api, None
        if code != prepared.expected:
            if code not in LOAD_CODES and (call.bad is not None or prepared.expected != "OK"):
                ledger.wrong_status[(self.api, call.name, prepared.expected, code)] += 1
                exception = StatusError(f"expected {prepared.expected}, got {code}")
            else:
                exception = StatusError(code)
        elif code != "OK":
            ledger.expected_errors[(self.api, call.name, code)] += 1
            request_type = f"{self.api} expected-error"
        else:
            problem = self.protocol.check(call, reply)
            if problem is not None:
                ledger.bad_replies[(self.api, problem)] += 1
                exception = StatusError(f"bad reply: {problem}")
            else:
                ledger.texts_ok += len(call.texts)
        self.environment.events.request.fire(
            request_type=request_type, name=call.name, response_time=elapsed_ms,
            response_length=len(reply), exception=exception, context={},
        )  # fmt: skip

    def on_stop(self) -> None:
        # Let open-loop calls in flight finish, so each is counted by the client as well.
        self.pending.join(timeout=self.load.options.timeout + 1)
        self.pending.kill(block=True, timeout=1)


class NativeUser(GrpcUser):
    """attnserve.v1 Classifier/Classify."""

    api = "native"
    method = NATIVE_METHOD


class V2User(GrpcUser):
    """inference.GRPCInferenceService/ModelInfer with a TEXT input."""

    api = "v2"
    method = MODEL_INFER
