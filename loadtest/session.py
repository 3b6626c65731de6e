"""One load-test run: options, channels, the client ledger and the reconciliation at the end.

Created when the test starts (after the command line is parsed), shared by every simulated
user of the process, closed when the test stops.
"""

from __future__ import annotations

import argparse
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from attnserve.service.common.vocabulary import AttentionKind, AttentionMode
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as npb
from loadtest.ledger import LoadLedger
from loadtest.protocol import GET_MODEL_METHOD, NativeProtocol, V2Protocol, WireProtocol, limits_of
from loadtest.reconcile import Reconciliation, Scrape, delta, dump, metrics_urls, reconcile, scrape, settle
from loadtest.workload import Mix, ModelLimits, Workload

log = logging.getLogger("loadtest")
RawCall = Callable[..., bytes]
# The modes a native call that asks for attention may ask, by word, to their attnserve.v1 numbers.
MODES = {mode.word: int(mode) for mode in AttentionMode if mode != AttentionMode.NONE}


def channel_options(target: str, index: int) -> list[tuple[str, int | str]]:
    options: list[tuple[str, int | str]] = [
        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        # Own connection per channel: several connections spread over --workers processes.
        ("grpc.use_local_subchannel_pool", 1),
        ("attnserve.loadtest_channel", index),
    ]
    if target.startswith("dns:"):  # every replica behind the name, not just the first
        options.append(("grpc.lb_policy_name", "round_robin"))
    return options


def mix_of(options: argparse.Namespace) -> Mix:
    weights = tuple(float(w) for w in str(options.lengths).split(","))
    return Mix(
        lengths=weights,  # type: ignore[arg-type]  # Mix checks the count
        attention_share=options.attention_share,
        batch_share=options.batch_share,
        max_batch=options.max_batch,
        deadline_share=options.deadline_share,
        deadline_ms=options.deadline_ms,
        bad_share=options.bad_share,
    )


@dataclass(eq=False)
class LoadRun:
    options: argparse.Namespace
    target: str
    ledger: LoadLedger = field(default_factory=LoadLedger)
    model: str = ""
    limits: ModelLimits = field(default_factory=lambda: ModelLimits(max_len=64))
    has_attention: bool = True
    lines: list[str] = field(default_factory=list)
    _channels: list[grpc.Channel] = field(default_factory=list)
    _urls: list[str] = field(default_factory=list)
    _before: Scrape | None = None
    _users: int = 0

    def start(self) -> None:
        options = self.options
        self._channels = [
            grpc.insecure_channel(self.target, options=channel_options(self.target, i))
            for i in range(max(1, options.channels))
        ]
        get_model = self._channels[0].unary_unary(
            GET_MODEL_METHOD,
            request_serializer=npb.GetModelRequest.SerializeToString,
            response_deserializer=npb.ModelInfo.FromString,
        )
        info = get_model(npb.GetModelRequest(model=options.model), timeout=30, wait_for_ready=True)
        self.model, self.limits = info.name, limits_of(info)
        self.has_attention = info.attention.kind != AttentionKind.NONE
        if options.texts_file:
            self.lines = Path(options.texts_file).read_text().splitlines()
        if options.metrics:
            self._urls = metrics_urls([s for s in str(options.metrics).split(",") if s.strip()])
            self._before = scrape(self._urls)
        log.info("load test of %s at %s (%s loop); reconciliation %s", self.model, self.target,
                 options.loop, "against " + ", ".join(self._urls) if self._urls else "off")  # fmt: skip

    def protocol(self, api: str) -> WireProtocol:
        if api == "native":
            return NativeProtocol(self.model, self.limits, MODES[self.options.attention_mode])
        return V2Protocol(self.model, self.limits)

    def workload(self, protocol: WireProtocol) -> Workload:
        """A workload per simulated user, seeded from the run's seed and the user's number."""
        self._users += 1
        mix = mix_of(self.options)
        if not self.has_attention:
            mix = Mix(**{**mix.__dict__, "attention_share": 0.0})
        seed = random.Random(f"{self.options.seed}/{self._users}").randrange(2**31)
        return Workload(mix, self.limits, protocol.bad_kinds, seed=seed, lines=self.lines)

    def call(self, index: int, method: str) -> RawCall:
        channel = self._channels[index % len(self._channels)]
        return channel.unary_unary(method, request_serializer=None, response_deserializer=None)  # raw bytes

    def finish(self, report_prefix: str | None) -> Reconciliation | None:
        """Reconcile with the server (when metrics are configured) and write the reports."""
        for channel in self._channels:
            channel.close()
        result = None
        if self._before is not None:
            abandoned = self.ledger.abandoned()
            expected = self.ledger.answered_definitely()
            after = settle(self._urls, self._before, expected, timeout=self.options.settle_timeout)
            result = reconcile(self.ledger.codes(), abandoned, delta(self._before, after))
            print(result.to_markdown(), flush=True)
        if report_prefix:
            self.ledger.write(Path(f"{report_prefix}_ledger.json"))
            if result is not None:
                Path(f"{report_prefix}_reconciliation.json").write_text(dump(result))
                Path(f"{report_prefix}_reconciliation.md").write_text(result.to_markdown())
        return result
