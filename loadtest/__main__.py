from __future__ import annotations

import sys

from loadtest.cli import main

sys.exit(main())
