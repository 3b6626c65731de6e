"""`python -m attnserve.training.cli`: the same command as `attnserve-train`."""

from attnserve.training.cli.main import main

raise SystemExit(main())
