"""Free TCP ports on 127.0.0.1 for servers started by tests, bench and loadtest."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Picked below the kernel's ephemeral range: a port from inside it can be handed to another
# process's `bind(0)` or outgoing connection between our check and the server's own bind,
# which parallel test workers did. Randomised so that workers rarely try the same one, from the
# system's entropy: a test that seeds `random` (training does) must not make workers agree.
LOWEST = 10_000
_PICK = random.SystemRandom()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default; other systems start theirs at 49152


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port nothing holds at this moment, outside the ephemeral range where it can."""
    high = _ephemeral_low() - 1
    if high - LOWEST >= 1_000:
        for _ in range(100):
            port = _PICK.randint(LOWEST, high)
            if _bindable(port):
                return port
    with socket.socket() as probe:  # a narrow or odd range: the kernel's own pick
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
