"""The `attnserve-train` command: `main` is its entry point (setup.py's console script).

`exits.py` is the exit-status contract of both commands, `attnserve-train` and
`attnserve-export`: each runs its body through `exits.run_cli`.
"""

from attnserve.training.cli.main import main as main

__all__ = ["main"]
