"""`python -m attnserve.training` (what `torchrun ... -m attnserve.training` runs): attnserve-train."""

from attnserve.training.cli.main import main
from attnserve.training.loop.distributed import exit_process

exit_process(main())
