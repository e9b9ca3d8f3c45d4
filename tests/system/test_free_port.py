"""`services.stack.free_port`: a port for a service to listen on, chosen outside the kernel's
ephemeral range.

The measured failure: a `make run` test's simulator failed to start with "Address already in use"
on port 58703. `free_port` had asked the kernel for a port (bind to 0, then close), which hands out
the same ephemeral range as every outgoing connection and every other server bound to port 0 in the
meantime; by the time the service bound it, something else had it. Below that range only another
fixed choice can take it.
"""

from __future__ import annotations

import pathlib
import socket

from services import stack
from services.stack import free_port


def ephemeral_range() -> tuple[int, int]:
    low, high = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def test_a_free_port_is_outside_the_ephemeral_range_and_can_be_bound():
    low, high = ephemeral_range()
    ports = {free_port() for _ in range(50)}
    assert all(not low <= port <= high for port in ports), sorted(ports)
    assert all(1024 < port < 65536 for port in ports)
    assert len(ports) > 40  # chosen at random, not one after the other
    for port in list(ports)[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_someone_listens_on_is_not_chosen(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        # The busy port twice, then the real random choice (a fixed neighbour such as busy + 1
        # sits in the ephemeral range, where another socket of the suite may hold it).
        tries = iter([busy, busy])
        choose = stack._candidate_port
        monkeypatch.setattr(
            stack, "_candidate_port", lambda low, high: next(tries, None) or choose(low, high)
        )
        assert free_port() != busy
