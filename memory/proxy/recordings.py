"""Replies recorded after their response has gone out, kept in order per session.

Storing a reply costs a transaction (lock the session, check its open tail, insert); the client
need not wait for it. So the proxy answers first and records in the thread pool, and a later
request of the same session waits here until the replies recorded before it are stored: its
history is then compared with a tail that holds them, and a reply the client sends back is
recognised instead of stored twice. The order holds within one proxy process; see docs/proxy.md
for several proxies in front of one session.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable

__all__ = ["Recordings"]

Key = tuple[str, str]


class Recordings:
    """The recordings in flight, by ``(user, session)``.

    Start them on the event loop (``start``); a request awaits ``settled`` for its session
    before it reads the session; shutdown awaits ``drain``. ``wait`` lets another thread (a
    test, a benchmark) wait until none is in flight.
    """

    def __init__(self) -> None:
        self._tasks: dict[Key, set[asyncio.Task[None]]] = {}
        self._in_flight = 0
        self._idle = threading.Condition()

    def start(self, key: Key, recording: Awaitable[None]) -> None:
        """Run ``recording`` (which handles its own errors) as a task of the running loop."""
        task = asyncio.ensure_future(recording)
        with self._idle:
            self._in_flight += 1
        self._tasks.setdefault(key, set()).add(task)
        task.add_done_callback(lambda done: self._finished(key, done))

    async def settled(self, key: Key) -> None:
        """Return once every recording started for ``key`` so far is over."""
        tasks = self._tasks.get(key)
        if tasks:
            # shield: a request whose client goes away must not cancel another's recording.
            await asyncio.wait([asyncio.shield(task) for task in tasks])

    async def drain(self) -> None:
        """Return once every recording started so far is over (at shutdown)."""
        tasks = [task for tasks in self._tasks.values() for task in tasks]
        if tasks:
            await asyncio.wait(tasks)

    def wait(self, timeout: float) -> bool:
        """Block this (non-loop) thread until no recording is in flight; ``False`` on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def _finished(self, key: Key, task: asyncio.Task[None]) -> None:
        tasks = self._tasks.get(key)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self._tasks[key]
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()
