"""`python -m loadtest`: load test a running attnserve at HOST:PORT for a bounded time.

    python -m loadtest --target 127.0.0.1:50051 --duration 30s
    python -m loadtest --target 127.0.0.1:50051 --duration 2m --loop open --rate 400 --api native
    python -m loadtest --target 127.0.0.1:50051 --duration 30s --bad-share 0.1 --deadline-ms 100

Runs Locust headless on loadtest/locustfile.py and writes its CSV and HTML reports, the
client ledger and the reconciliation with the server's Prometheus counters to --out.
Options this command does not know go to Locust unchanged: the request-mix options listed
at the end of --help, and Locust's own (`locust --help`).

Exit status: 0 all calls answered as expected and the counts reconcile; 1 some calls
failed (shed, deadline exceeded, wrong status or bad reply: see the failures CSV);
3 the server's counters do not match the client's; 2 bad usage.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from loadtest.options import describe
from loadtest.verdict import explain

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
USER_CLASSES = {"native": ["NativeUser"], "v2": ["V2User"], "both": ["NativeUser", "V2User"]}
MAX_SECONDS = 24 * 3600
_SPAN = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def seconds(text: str) -> float:
    """'30', '30s', '2m', '1h30m' -> seconds (bounded: a load test always ends)."""
    match = _SPAN.match(text.strip())
    if not text.strip() or match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30s, 2m or 1h30m")
    hours, minutes, secs = (float(part) if part else 0.0 for part in match.groups())
    total = hours * 3600 + minutes * 60 + secs
    if not 0 < total <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"duration {text!r} must be more than 0 and at most 24h")
    return total


def metrics_default(target: str) -> str:
    """The server's metrics endpoint when not given: the target's host, port 9100."""
    address = target.removeprefix("dns:///").removeprefix("ipv4:")
    host = address.rpartition(":")[0] or address
    return f"{host}:9100"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="request mix and reconciliation (passed to the locustfile):\n" + describe()
        + "\n\nAny other option goes to Locust itself (see `locust --help`).",
    )  # fmt: skip
    parser.add_argument("--target", required=True, help="host:port of the server (or dns:///name:port)")
    parser.add_argument("--duration", type=seconds, default=30.0, help="run time, e.g. 30s, 5m (default 30s)")
    parser.add_argument("--api", choices=sorted(USER_CLASSES), default="both")
    parser.add_argument("--users", type=int, default=16, help="simulated users (closed loop: concurrency)")
    parser.add_argument(
        "--spawn-rate", type=float, default=0.0, help="users started per second (0: all at once)"
    )
    parser.add_argument("--loop", choices=("closed", "open"), default="closed")
    parser.add_argument("--rate", type=float, default=100.0, help="open loop: calls per second")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--metrics", help="server metrics HOST:PORT or URL(s), comma-separated (default: HOST:9100)"
    )
    where.add_argument(
        "--no-reconcile", action="store_true", help="skip the check against the server's counters"
    )
    parser.add_argument("--out", type=Path, help="report folder (default loadtest/reports/<time>)")
    parser.add_argument("--stop-timeout", type=float, default=35.0,
                        help="seconds users get to finish calls in flight when the time is up")  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="print only the final summary")
    return parser


def locust_command(args: argparse.Namespace, extra: Sequence[str]) -> list[str]:
    users = max(1, args.users)
    command = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
        "--host", args.target, "--users", str(users),
        "--spawn-rate", str(args.spawn_rate if args.spawn_rate > 0 else users),
        "--run-time", f"{args.duration:g}s", "--stop-timeout", f"{args.stop_timeout:g}",
        "--loop", args.loop, "--rate", f"{args.rate:g}",
        "--csv", str(args.out / "attnserve"), "--csv-full-history",
        "--html", str(args.out / "attnserve.html"),
    ]  # fmt: skip
    if not args.no_reconcile:
        command += ["--metrics", args.metrics or metrics_default(args.target)]
    if args.quiet:
        command.append("--only-summary")
    return [*command, *extra, *USER_CLASSES[args.api]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.out is None:
        args.out = Path(__file__).resolve().parent / "reports" / time.strftime("%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    command = locust_command(args, extra)
    limit = args.duration + args.stop_timeout + 120  # start-up, settling and the reports
    try:
        status = subprocess.run(command, timeout=limit).returncode
    except subprocess.TimeoutExpired:
        print(f"loadtest: locust did not finish within {limit:.0f}s", file=sys.stderr)
        return 1
    print(f"reports in {args.out}:")
    for path in sorted(args.out.iterdir()):
        print(f"  {path.name}")
    for line in explain(status, args.out):
        print(line, file=sys.stderr)
    return status
