"""The proxy's listening socket: bound before serving, with Nagle's algorithm off.

uvicorn (its ``h11`` protocol) writes a response's headers and its body in two sends. On a
connection with Nagle's algorithm on, the body waits until the client acknowledges the
headers, and a client in delayed-ACK mode waits up to 40 ms to do so: every response took
40 ms more. asyncio turns Nagle off by itself only on sockets it creates for TCP
(``proto == IPPROTO_TCP``); a socket from ``socket.create_server`` has ``proto == 0``, so the
connections accepted on it keep Nagle on. Linux and the BSDs copy ``TCP_NODELAY`` from a
listening socket to the connections it accepts, so it is set here, once.
"""

from __future__ import annotations

import socket

__all__ = ["open_listener"]


def open_listener(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: a free port) and listening, without Nagle.

    Raises:
        OSError: the address cannot be bound (in use, not local, ...).
    """
    listener = socket.create_server((host, port))
    try:
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        listener.close()
        raise
    return listener
