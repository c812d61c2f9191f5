"""The proxy's listening socket turns Nagle's algorithm off for every connection it accepts."""

from __future__ import annotations

import socket

import pytest

from memory.proxy.listener import open_listener


def test_accepted_connections_send_without_waiting_for_acks() -> None:
    # With Nagle on, a response written as headers then body waited for the client's delayed
    # ACK: 40 ms more per response (see memory/proxy/listener.py).
    with open_listener("127.0.0.1", 0) as listener:
        client = socket.create_connection(listener.getsockname()[:2])
        accepted, _ = listener.accept()
        with client, accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_a_port_in_use_is_refused_and_nothing_is_left_open() -> None:
    with open_listener("127.0.0.1", 0) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match="in use"):
            open_listener("127.0.0.1", port)
