"""`python -m attnserve.training` (what `torchrun ... -m attnserve.training` runs): attnserve-train."""

from attnserve.training.cli.main import main

raise SystemExit(main())
