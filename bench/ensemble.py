"""`python -m bench.ensemble RUN...`, the spelling docs/training.md uses: `python -m bench ensemble`."""

from __future__ import annotations

import sys

from bench.training.ensemble import main

if __name__ == "__main__":
    sys.exit(main())
