"""A request goes down the layers only: no call from below into a layer above, traced.

import-linter checks the imports; a callable handed down (a token count given to retrieval, a
counter of the session given to the pure core) is called from below without an import. So a
warm ``prepare`` with cards on is traced with a profile hook on every thread, as
``benchmarks/package_hops.py`` does, and each call is checked by the folders of its caller and
callee. Real embedded Postgres; the hashing embedder (named as MiniLM, the model the shared test
database records); a token budget for the memories, so the budgeted walk runs.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from memory import Memory, Settings
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database

ROOT = Path(__file__).resolve().parents[2]


def place(frame: FrameType) -> str | None:
    """The folder of the project a frame's code is in (``memory/context``, ``retrieval``),
    else None (a library's, a test's)."""
    path = Path(frame.f_code.co_filename)
    if not path.is_relative_to(ROOT):
        return None
    parts = path.relative_to(ROOT).parts
    if parts[0] not in ("memory", "retrieval", "storage"):
        return None
    return "/".join(parts[:-1])


class Trace:
    """(caller folder, callee folder, callee) of every project call while ``recording``."""

    def __init__(self) -> None:
        self.recording = False
        self.calls: set[tuple[str, str, str]] = set()

    def hook(self, frame: FrameType, event: str, _arg: Any) -> None:
        if not self.recording or event != "call":
            return
        callee = place(frame)
        if callee is None:
            return
        caller, back = None, frame.f_back
        while back is not None and caller is None:  # library frames between are skipped
            caller, back = place(back), back.f_back
        if caller is not None:
            self.calls.add((caller, callee, f"{frame.f_code.co_filename}:{frame.f_code.co_name}"))


def against_the_layers(caller: str, callee: str) -> bool:
    """Whether a call goes up or around the layers: storage or retrieval into a layer above,
    the pure core into the rest of ``memory``, long-term memory into storage past retrieval."""
    top = {"memory": 0, "retrieval": 1, "storage": 2}
    if top[callee.split("/")[0]] < top[caller.split("/")[0]]:
        return True
    if caller.startswith("memory/context") and not callee.startswith("memory/context"):
        return True
    return caller.startswith("memory/longterm") and callee.startswith("storage")


def test_a_warm_prepare_with_cards_calls_only_downward(database_url: str, user_id: str) -> None:
    trace = Trace()
    threading.setprofile(trace.hook)  # the Memory's threads, started from now on, carry it
    sys.setprofile(trace.hook)
    try:
        settings = Settings(summary={"mode": "inline"}, cards={"max_tokens": 200})
        with Memory(
            Database.open(database_url), settings, embedder=HashingEmbedder(name=MINILM_NAME)
        ) as mem:
            said = [
                "We adopted a puppy named Biscuit.",
                "Biscuit the puppy chews every shoe.",
                "The puppy Biscuit sleeps in a basket.",
            ]
            mem.record(
                user_id=user_id,
                session_id="old",
                messages=[
                    message
                    for text in said
                    for message in (
                        {"role": "user", "content": text},
                        {"role": "assistant", "content": "Noted."},
                    )
                ],
            )
            mem.end_session(user_id=user_id, session_id="old")
            mem.pin(user_id=user_id, text="Answer in British English.")
            mem.prepare(user_id=user_id, session_id="new", input="Where does the puppy sleep?")
            trace.recording = True
            context = mem.prepare(user_id=user_id, session_id="new", input="And Biscuit?")
            trace.recording = False
    finally:
        sys.setprofile(None)
        threading.setprofile(None)

    recall = context.report.recall
    assert recall is not None and any(not card.pinned for card in recall.cards)
    folders = {(caller, callee.split("/")[0]) for caller, callee, _ in trace.calls}
    assert ("memory/longterm", "retrieval") in folders and ("retrieval", "storage") in folders
    upward = sorted(call for call in trace.calls if against_the_layers(call[0], call[1]))
    assert upward == []
