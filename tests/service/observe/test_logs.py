"""Log lines as the server writes them: parsed back from a real process's stderr."""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from attnserve.service.observe.logs import AccessLog, CallIds, bind_call, current_call, unbind_call

# Runs in a fresh interpreter, so the root logger and uvicorn's loggers start as they would
# in `attnserve-serve`: two concurrent calls log, one writes its access line, uvicorn starts
# and stops a real server, grpc's Python logger speaks, and an exception is logged.
PROCESS = textwrap.dedent(
    """
    import asyncio, logging, socket, sys
    import uvicorn
    from attnserve.service.observe.logs import AccessLog, bind_call, configure_logging, unbind_call

    configure_logging("info", sys.argv[1], worker=sys.argv[2])
    log = logging.getLogger("attnserve.service.calls")
    access = AccessLog(1.0)

    async def call(request_id, ids, pause):
        token = bind_call(request_id, ids)
        try:
            log.info("start %s", request_id)
            await asyncio.sleep(pause)
            log.info("end %s", request_id)
            access(transport="grpc", method="Classify", model="car", version=1, texts=2,
                   status="OK", latency_s=0.0015, queue_s=0.0002)
        finally:
            unbind_call(token)

    async def app(scope, receive, send):
        pass

    async def main():
        await asyncio.gather(
            call("r-1", ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"), 0.02),
            call("r-2", None, 0.01),
        )
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="off"))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        server.should_exit = True
        await serving

    asyncio.run(main())
    logging.getLogger("grpc._cython.cygrpc").warning("grpc says hello")
    try:
        1 / 0
    except ZeroDivisionError:
        log.exception("failed")
    """
)


def _run(log_format: str, worker: str = "") -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", PROCESS, log_format, worker], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stderr.splitlines()


def test_json_lines_carry_time_level_logger_and_the_calls_ids() -> None:
    lines = [json.loads(line) for line in _run("json", worker="4711")]
    by_message = {line["message"]: line for line in lines}
    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(line), line
        assert line["time"].endswith("+00:00") and line["worker"] == "4711"
    first, second = by_message["start r-1"], by_message["start r-2"]
    assert first["request_id"] == "r-1" and first["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert first["span_id"] == "00f067aa0ba902b7" and first["logger"] == "attnserve.service.calls"
    assert second["request_id"] == "r-2" and "trace_id" not in second
    assert by_message["end r-1"]["request_id"] == "r-1", "each task keeps its own call's ids"
    access = [line for line in lines if line["logger"] == "attnserve.access"]
    assert [a["request_id"] for a in access] == ["r-2", "r-1"]
    assert {k: access[1][k] for k in ("transport", "method", "model", "version", "texts", "status")} == {
        "transport": "grpc",
        "method": "Classify",
        "model": "car",
        "version": "1",
        "texts": 2,
        "status": "OK",
    }
    assert access[1]["latency_ms"] == 1.5 and access[1]["queue_ms"] == 0.2
    uvicorn_lines = [line for line in lines if line["logger"].startswith("uvicorn")]
    assert any("Started server process" in line["message"] for line in uvicorn_lines), lines
    assert by_message["grpc says hello"]["level"] == "warning"
    failed = by_message["failed"]
    assert failed["level"] == "error" and "ZeroDivisionError" in failed["exception"]
    assert "request_id" not in by_message["grpc says hello"], "outside a call no ids are invented"


def test_text_lines_append_the_ids() -> None:
    lines = _run("text")
    (start,) = [line for line in lines if "start r-1" in line]
    assert start.endswith(
        "[request_id=r-1 trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7]"
    )
    assert " INFO attnserve.service.calls: start r-1" in start
    (access,) = [line for line in lines if "attnserve.access" in line and "r-2" in line]
    assert "grpc Classify model=car version=1 texts=2 status=OK latency_ms=1.500 queue_ms=0.200" in access
    assert any("INFO uvicorn.error: Started server process" in line for line in lines), lines


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _access_logger(name: str) -> tuple[logging.Logger, _Records]:
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    records = _Records()
    logger.handlers = [records]
    return logger, records


def _one_call(access: AccessLog) -> bool:
    return access(
        transport="http", method="ModelInfer", model="car", version=2, texts=1, status="OK", latency_s=0.001
    )


@pytest.mark.parametrize("sample", [0.0, 0.1, 1.0])
def test_access_lines_are_sampled(sample: float) -> None:
    logger, records = _access_logger(f"test.access.{sample}")
    access = AccessLog(sample, logger, chance=random.Random(7).random)
    written = sum(_one_call(access) for _ in range(4000))
    assert written == len(records.records)
    expected = 4000 * sample
    assert abs(written - expected) <= 4 * (4000 * sample * (1 - sample)) ** 0.5  # binomial bounds
    assert access.enabled == (sample > 0)
    if written:
        fields: dict[str, Any] = records.records[0].access  # type: ignore[attr-defined]
        assert fields["queue_ms"] is None and fields["version"] == "2"


def test_access_log_is_off_when_its_logger_is_above_info() -> None:
    logger, records = _access_logger("test.access.warning")
    logger.setLevel(logging.WARNING)
    access = AccessLog(1.0, logger)
    assert not access.enabled and not _one_call(access) and not records.records
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        AccessLog(1.5)


def test_bound_call_wins_and_unbinding_restores() -> None:
    assert current_call() is None
    outer = bind_call("a")
    inner = bind_call("b", ("1" * 32, "2" * 16))
    assert current_call() == CallIds("b", "1" * 32, "2" * 16)
    unbind_call(inner)
    assert current_call() == CallIds("a")
    unbind_call(outer)
    assert current_call() is None
