"""``Served``: an ASGI app (the fake upstream, the proxy, the inspector page) served for real.

One helper for the proxy's and the page's tests and for ``benchmarks/proxy.py`` (which loads
``tests/memory/proxy/upstream_fake.py`` by path, with this folder importable).
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

import uvicorn

from memory.proxy.listener import open_listener

__all__ = ["Served"]


class Served:
    """An ASGI app served by uvicorn in a thread on 127.0.0.1; a context manager.

    The socket is bound and listening before the thread starts, so requests made at once wait
    in its backlog until the server (its startup done) accepts them. It is the proxy's own
    listener (Nagle off), as a real upstream's would be: with Nagle on, each answer of the fake
    took 40 ms more and the benchmark's baseline measured that instead of the upstream.
    """

    def __init__(self, app: Any) -> None:
        self._socket = open_listener("127.0.0.1", 0)
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        host, port = self._socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Served:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.should_exit = True
        self._thread.join()
        self._socket.close()
