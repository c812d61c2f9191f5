"""Load time of the inspector page (``stratamem ui``) on a long session.

    python -m benchmarks.ui [--messages 10000] [--prepare-every 100] [--loads 50]

Stores a session of ``--messages`` messages (``benchmarks.archive``'s support chat: questions,
tool calls and their results, answers; a fact now and then) on an embedded Postgres in a
temporary folder, offline (hashing embedder, inline raw summaries), with a ``prepare`` after
every ``--prepare-every`` messages, so the session has kept reports, a rolling summary with
versions and cards. Then serves the page over HTTP (uvicorn on 127.0.0.1, an admin key checked
on every request, as ``stratamem ui`` serves it) and loads each page ``--loads`` times after
three warm-up loads, one at a time: the session's latest messages (its default), its first
page, a page in the middle, its summary versions, the user, the user's long-term memory, the
list of users. Printed per page: its size and the p50 and p95 of the whole HTTP round trip.
The messages are paged (``memory.ui.pages_session.MESSAGES_PER_PAGE`` a page), so the page's
cost should not grow with the session.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn

from benchmarks.archive import turn
from benchmarks.machine import CpuSteal, machine_state
from memory import Memory
from memory.proxy.keys import KeyRing
from memory.proxy.listener import open_listener
from memory.ui import create_app
from memory.ui.pages_session import MESSAGES_PER_PAGE
from storage.proxy_keys import ProxyKeyStore


@contextmanager
def served(mem: Memory) -> Iterator[str]:
    """The page over ``mem`` (keys required), served by uvicorn in a thread: its base URL."""
    listener = open_listener("127.0.0.1", 0)
    config = uvicorn.Config(create_app(mem), log_level="warning", lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        host, port = listener.getsockname()[:2]
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join()
        listener.close()


def store_session(mem: Memory, user_id: str, session_id: str, count: int, every: int) -> int:
    """Store turns until the session holds ``count`` messages or more, preparing a request
    after each ``every`` of them (each prepare keeps its report); how many it holds."""
    stored, index, batch = 0, 0, []
    while stored < count:
        messages = turn(index)
        batch += messages
        stored += len(messages)
        index += 1
        if len(batch) >= every or stored >= count:
            mem.record(user_id=user_id, session_id=session_id, messages=batch)
            mem.prepare(user_id=user_id, session_id=session_id)
            batch = []
    mem.kept_reports(user_id=user_id, session_id=session_id, limit=1)  # all written
    return stored


def load_times(client: httpx.Client, path: str, loads: int) -> tuple[list[float], int]:
    """Milliseconds of ``loads`` loads of ``path`` (after three warm-up loads), and its size."""
    size = 0
    for _ in range(3):
        warm = client.get(path)
        warm.raise_for_status()
        size = len(warm.content)
    times = []
    for _ in range(loads):
        started = time.perf_counter()
        answer = client.get(path)
        times.append(1000 * (time.perf_counter() - started))
        answer.raise_for_status()
    return times, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--prepare-every", type=int, default=100)
    parser.add_argument("--loads", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stratamem-ui-") as folder:
        mem = Memory.open(
            data_dir=Path(folder),
            context_window=16_000,
            max_output=1_000,
            summary={"mode": "inline"},
            cards={"embedder": "hashing"},
            llm_api_key=None,
            llm_base_url=None,
        )
        with mem:
            user_id, session_id = f"bench-{uuid.uuid4().hex[:8]}", "long"
            started = time.perf_counter()
            stored = store_session(mem, user_id, session_id, args.messages, args.prepare_every)
            print(f"stored {stored:,} messages in {time.perf_counter() - started:.0f} s")
            key, _ = KeyRing(ProxyKeyStore(mem.database)).create(user_id=None, label="bench")
            where = f"user={user_id}&session={session_id}"
            pages = {
                "session, latest messages": f"/session?{where}",
                "session, first page": f"/session?{where}&at=1",
                "session, middle page": f"/session?{where}&at={stored // 2}",
                "summary versions": f"/summary?{where}",
                "user": f"/user?user={user_id}",
                "long-term memory": f"/memory?user={user_id}",
                "users": "/",
            }
            with (
                served(mem) as url,
                httpx.Client(
                    base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60
                ) as client,
            ):
                steal = CpuSteal()
                print(
                    f"{'page':<26} {'KB':>6} {'p50 ms':>8} {'p95 ms':>8}  "
                    f"({args.loads} loads, {MESSAGES_PER_PAGE} messages a page)"
                )
                for name, path in pages.items():
                    times, size = load_times(client, path, args.loads)
                    p95 = statistics.quantiles(times, n=20)[-1]
                    print(
                        f"{name:<26} {size / 1024:>6.0f} {statistics.median(times):>8.1f} "
                        f"{p95:>8.1f}"
                    )
                print(machine_state(steal))


if __name__ == "__main__":
    main()
