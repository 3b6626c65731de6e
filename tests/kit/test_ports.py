"""kit/ports.py: the ports handed to test servers lie outside the kernel's ephemeral range, so
no other process's `bind(0)` or outgoing connection takes one before the server binds it."""

from __future__ import annotations

import random
import socket

import pytest

from kit.ports import LOWEST, _ephemeral_low, free_port


def test_a_free_port_is_below_the_ephemeral_range_and_can_be_listened_on() -> None:
    low = _ephemeral_low()
    if low - 1 - LOWEST < 1_000:
        pytest.skip(f"the ephemeral range starts at {low}: free_port takes the kernel's pick")
    ports = {free_port() for _ in range(50)}
    assert len(ports) > 40  # picked at random: parallel workers rarely try the same one
    for port in ports:
        assert LOWEST <= port < low
    picks, state = [], random.getstate()
    for _ in range(2):
        random.seed(0)  # as a training run in the same process does
        picks.append([free_port() for _ in range(3)])
    random.setstate(state)
    assert picks[0] != picks[1]  # not replayed from the seed, as two workers would agree
    with socket.socket() as server:
        server.bind(("127.0.0.1", ports.pop()))
        server.listen()
