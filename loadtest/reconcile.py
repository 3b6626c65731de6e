"""Reconcile the client's counts with the server's own `attnserve_requests_total`.

The server's counters are scraped before and after the run; their difference, summed over
models (an unknown model is counted as `_unknown`), is what the server saw, by API and
status. The rules, per API:

* every call the client saw answered with a definite status (OK, INVALID_ARGUMENT,
  NOT_FOUND, RESOURCE_EXHAUSTED, ...) is counted by the server with that status: none lost;
* the server counts no more calls than the client sent: none double-counted (or another
  client used the server during the run: the check assumes the load test is its only
  inference client);
* a call the client saw end with DEADLINE_EXCEEDED or CANCELLED, or abandoned mid-flight,
  is *unresolved*: its deadline may have passed in the client's queue before it was sent,
  on the wire, or inside the server, and the server's reply can lose the race with it, so
  the server counts it once with any status, or not at all. With no unresolved calls every
  status, and the total, must match exactly.
"""

from __future__ import annotations

import json
import socket
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kit import metrics
from kit.metrics import samples

REQUESTS = "attnserve_requests_total"
INFLIGHT = "attnserve_inflight_requests"
UNRESOLVED = ("DEADLINE_EXCEEDED", "CANCELLED")

Codes = Mapping[tuple[str, str], float]


def metrics_urls(specs: Sequence[str]) -> list[str]:
    """`http://...` URLs as given; `HOST:PORT` as every IPv4 address HOST resolves to (each
    replica behind a DNS name is scraped once)."""
    urls: list[str] = []
    for spec in specs:
        if spec.startswith(("http://", "https://")):
            urls.append(spec if urlsplit(spec).path not in ("", "/") else spec.rstrip("/") + "/metrics")
            continue
        host, _, port = spec.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"metrics endpoint {spec!r}: expected HOST:PORT or an http:// URL")
        infos = socket.getaddrinfo(host.strip("[]"), int(port), socket.AF_INET, socket.SOCK_STREAM)
        for address in sorted({info[4][0] for info in infos}):
            urls.append(f"http://{address}:{port}/metrics")
    if not urls:
        raise ValueError("no metrics endpoint to scrape")
    return urls


@dataclass(frozen=True)
class Scrape:
    requests: dict[tuple[str, str], float]  # (protocol, code) -> gRPC calls, summed over models and endpoints
    inflight: float


def scrape(urls: Sequence[str], timeout: float = 10.0) -> Scrape:
    requests: dict[tuple[str, str], float] = {}
    inflight = 0.0
    for url in urls:
        for sample in samples(metrics.scrape(url, timeout)):
            if sample.name == REQUESTS and sample.labels.get("transport") == "grpc":  # what a load test sends
                key = (sample.labels["protocol"], sample.labels["code"])
                requests[key] = requests.get(key, 0.0) + sample.value
            elif sample.name == INFLIGHT:
                inflight += sample.value
    return Scrape(requests, inflight)


def delta(before: Scrape, after: Scrape) -> dict[tuple[str, str], int]:
    keys = set(before.requests) | set(after.requests)
    diff = {key: round(after.requests.get(key, 0.0) - before.requests.get(key, 0.0)) for key in keys}
    return {key: value for key, value in diff.items() if value}


@dataclass(frozen=True)
class Row:
    api: str
    code: str
    client: int
    server: int
    allowed: tuple[int, int]  # inclusive range the server's count may take

    @property
    def ok(self) -> bool:
        return self.allowed[0] <= self.server <= self.allowed[1]


@dataclass
class Reconciliation:
    rows: list[Row]
    totals: dict[str, tuple[int, int]]  # api -> (client calls incl. abandoned, server calls)
    unresolved: dict[str, int]  # api -> calls whose server-side fate the client cannot know
    abandoned: dict[str, int]
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "matched": self.ok,
            "problems": self.problems,
            "totals": {api: {"client": c, "server": s} for api, (c, s) in self.totals.items()},
            "unresolved": self.unresolved,
            "abandoned": self.abandoned,
            "rows": [
                {"api": r.api, "code": r.code, "client": r.client, "server": r.server,
                 "allowed": list(r.allowed), "ok": r.ok}
                for r in self.rows
            ],
        }  # fmt: skip

    def to_markdown(self) -> str:
        verdict = "MATCHED" if self.ok else "MISMATCH"
        lines = [f"## Reconciliation: {verdict}", "", "| api | status | client | server | allowed | |",
                 "|---|---|---:|---:|---|---|"]  # fmt: skip
        for r in self.rows:
            span = str(r.allowed[0]) if r.allowed[0] == r.allowed[1] else f"{r.allowed[0]}..{r.allowed[1]}"
            lines.append(
                f"| {r.api} | {r.code} | {r.client} | {r.server} | {span} | {'ok' if r.ok else 'FAIL'} |"
            )
        for api, (client, server) in sorted(self.totals.items()):
            low = client - self.unresolved.get(api, 0)
            span = str(client) if low == client else f"{low}..{client}"
            verdict = "ok" if low <= server <= client else "FAIL"
            lines.append(f"| {api} | **all** | {client} | {server} | {span} | {verdict} |")
        lines.append("")
        if any(self.unresolved.values()):
            lines.append(
                "Unresolved calls (deadline exceeded, cancelled or abandoned; the server may not have "
                f"seen them): "
                f"{self.unresolved}; abandoned mid-flight: {self.abandoned or 'none'}."
            )
        else:
            lines.append("No unresolved calls: every count must match exactly.")
        lines += [f"- {problem}" for problem in self.problems]
        return "\n".join(lines) + "\n"


def reconcile(client: Codes, abandoned: Mapping[str, int], server: Codes) -> Reconciliation:
    apis = sorted({api for api, _ in client} | {api for api, _ in server} | set(abandoned))
    rows: list[Row] = []
    totals: dict[str, tuple[int, int]] = {}
    unresolved: dict[str, int] = {}
    problems: list[str] = []
    for api in apis:
        c = {code: int(n) for (a, code), n in client.items() if a == api}
        s = {code: int(n) for (a, code), n in server.items() if a == api}
        lost = abandoned.get(api, 0)
        slack = unresolved[api] = lost + sum(c.get(code, 0) for code in UNRESOLVED)
        client_total, server_total = sum(c.values()) + lost, sum(s.values())
        totals[api] = (client_total, server_total)
        if server_total > client_total:
            problems.append(
                f"{api}: the server counted {server_total - client_total} call(s) more than were sent "
                "(double counting, or other clients during the run)"
            )
        elif server_total < client_total - slack:
            problems.append(
                f"{api}: the server counted {client_total - slack - server_total} answered call(s) fewer "
                "than the client received"
            )
        for code in sorted(set(c) | set(s)):
            if code in UNRESOLVED:
                row = Row(api, code, c.get(code, 0), s.get(code, 0), (0, slack))
            else:
                row = Row(api, code, c.get(code, 0), s.get(code, 0), (c.get(code, 0), c.get(code, 0) + slack))
            rows.append(row)
            if not row.ok:
                problems.append(
                    f"{api} {code}: client {row.client}, server {row.server}, allowed {row.allowed}"
                )
    return Reconciliation(rows, totals, unresolved, dict(abandoned), problems)


def settle(urls: Sequence[str], before: Scrape, expected: Mapping[str, int], timeout: float) -> Scrape:
    """Scrape until the server's per-API totals reach `expected` with nothing in flight, or
    `timeout` passes (a cancelled call is counted when the server notices, a little later)."""
    end = time.monotonic() + timeout
    while True:
        after = scrape(urls)
        seen: Counter[str] = Counter()
        for (api, _), n in delta(before, after).items():
            seen[api] += n
        if (
            after.inflight == 0 and all(seen[api] >= n for api, n in expected.items())
        ) or time.monotonic() > end:
            return after
        time.sleep(0.2)


def dump(result: Reconciliation) -> str:
    return json.dumps(result.to_json(), indent=2) + "\n"
