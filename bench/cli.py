"""`python -m bench`: every benchmark of attnserve, one command with a section for each
(docs/benchmarks.md). Exit status 1 when a measurement failed, 2 for a bad command line, a
missing model or a missing tool; 130 after Ctrl-C and 143 after SIGTERM, once every server it
started is stopped."""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Callable, Sequence
from typing import cast

from bench.sections import BY_NAME, Refused, expand_tiny, listing
from kit.launch import Stopped, stop_on_sigterm


def main(argv: Sequence[str] | None = None) -> int:
    try:
        with stop_on_sigterm():
            return _run(list(sys.argv[1:] if argv is None else argv))
    except Refused as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench: interrupted; the servers it started are stopped", file=sys.stderr)
        return 130
    except Stopped:
        print("bench: stopped by SIGTERM; the servers it started are stopped", file=sys.stderr)
        return 128 + signal.SIGTERM


def _run(args: list[str]) -> int:
    if args[:1] in (["list"], ["--list"]):
        print(listing())
        return 0
    section = BY_NAME.get(args[0]) if args else None
    if section is None:  # the serving suite: its flags or none
        from bench.serving.suite import main as suite

        return suite(args)
    run = cast(Callable[[list[str]], int], importlib.import_module(section.module).main)
    return run(expand_tiny(section, args[1:]))
