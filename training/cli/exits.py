"""How attnserve-train and attnserve-export end: the exit-status contract of both commands.

This is its one place: `training/cli/main.py` and `export/cli.py` run their bodies through
`run_cli`, and every subcommand raises `UsageError` for a request it cannot do.

- 0: done;
- 1: the work ran and failed a check (an export proof, say): the message names it;
- 2: the user asked for something that cannot be done (a missing file or column, a bad
  flag value): one line ``PROG: error: ...``, as argparse does for its own errors;
- 130: interrupted.

Tracebacks are for bugs only: every expected problem has its own exception type, listed
by the command that can meet it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from attnserve.training.data.core import DataError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """The command cannot do what it was asked; the message says what to change."""


# Problems with what a user passed in, for every command: their own data, files, flags.
USER_ERRORS: tuple[type[BaseException], ...] = (UsageError, DataError, FileNotFoundError, NotADirectoryError)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.strerror}: {exc.filename}"  # "[Errno 2] ..." says less than this
    return text or type(exc).__name__


def run_cli(
    prog: str,
    body: Callable[[Sequence[str]], int],
    argv: Sequence[str],
    *,
    user_errors: tuple[type[BaseException], ...] = (),
    failures: tuple[type[BaseException], ...] = (),
    failure_label: str = "failed",
) -> int:
    """Run ``body(argv)``, turning expected exceptions into one line on stderr and an exit status."""
    try:
        return body(argv)
    except USER_ERRORS + user_errors as exc:
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except failures as exc:
        print(f"{prog}: {failure_label}: {one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
