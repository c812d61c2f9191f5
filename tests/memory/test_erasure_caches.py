"""A forget leaves none of the user's texts in this process's memory (``retrieval.held_texts``),
and emptying the caches changes no one else's recall.

Real embedded Postgres; inline folds and archiving, cards by the hashing fake (named as MiniLM,
the model the shared test database records), so a ``prepare`` runs recall: its search, its
excerpts' line terms and stems, the query's dates and attributes, the held vectors and postings.
Every string of the process is searched (through the garbage collector's containers) for a
name the test module never holds whole: it is built from parts inside the helpers, and only
its lower-case form is held while searching, so stems and terms are found too.
"""

from __future__ import annotations

import gc
import json
import types

import pytest

import retrieval.excerpt_text
from memory import Memory, Settings
from memory.context.parts import MEMORIES_HEADER
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database

#: The forgotten user's name, in parts: no string of this module is the name itself.
NAME_PARTS = ("Zqv", "orthax")
#: The kept user's name, in parts.
KEPT_PARTS = ("Quel", "bryndor")


@pytest.fixture
def mem(database: Database) -> Memory:
    settings = Settings(summary={"mode": "inline", "debounce_seconds": 0})
    return Memory(database, settings, embedder=HashingEmbedder(name=MINILM_NAME))


def tell(mem: Memory, user_id: str, parts: tuple[str, ...]) -> None:
    """The user's past session, about a friend named by ``parts``, archived into cards."""
    name = "".join(parts)
    said = [
        (f"My friend {name} adopted a puppy last May.", "How lovely!"),
        (f"{name} lives in Galway and works at a bakery.", "Noted."),
        (f"On Friday {name} and I went sailing.", "Sounds fun."),
    ]
    mem.record(
        user_id=user_id,
        session_id="past",
        messages=[
            message
            for index, (text, answer) in enumerate(said)
            for message in (
                {"role": "user", "content": text, "id": f"u{index}"},
                {"role": "assistant", "content": answer, "id": f"a{index}"},
            )
        ],
    )
    mem.end_session(user_id=user_id, session_id="past")


def recalled(mem: Memory, user_id: str, session_id: str, parts: tuple[str, ...]) -> list[str]:
    """The memories ``prepare`` recalls for a question about the friend (none kept here)."""
    name = "".join(parts)
    context = mem.prepare(
        user_id=user_id,
        session_id=session_id,
        input=f"Where did {name} live before, and what did {name} adopt last May?",
    )
    first = context.messages[0]
    if first["role"] != "system" or not str(first["content"]).startswith(MEMORIES_HEADER):
        return []
    return [json.loads(line[2:]) for line in str(first["content"]).split("\n")[1:]]


def holders_of(parts: tuple[str, ...]) -> list[str]:
    """Where a string holding the name (in any case) is referred to in this process: the type
    of each container that refers to one, with the string's start.

    Frames are left out: this function's own locals are one, and whatever a frame keeps
    alive outside its locals' plain strings is a container searched here anyway.
    """
    wanted = "".join(parts).lower()
    gc.collect()
    containers = gc.get_objects()
    found: list[str] = []
    for container in containers:
        if type(container) is types.FrameType:  # not isinstance: no __class__ asked for
            continue
        for item in gc.get_referents(container):
            if type(item) is str and item is not wanted and wanted in item.lower():
                found.append(f"{type(container).__qualname__}: {item[:60]!r}")
    del containers
    return found


@pytest.mark.slow
def test_a_forget_leaves_none_of_the_users_texts_in_this_process(mem: Memory, user_id: str) -> None:
    tell(mem, user_id, NAME_PARTS)
    assert recalled(mem, user_id, "now", NAME_PARTS)  # recall ran and found the cards
    assert holders_of(NAME_PARTS)  # the caches hold the name now (else this tests nothing)

    mem.forget(user_id=user_id)

    assert holders_of(NAME_PARTS) == []


@pytest.mark.slow
def test_a_forget_of_one_session_leaves_none_of_its_texts_in_this_process(
    mem: Memory, user_id: str
) -> None:
    tell(mem, user_id, NAME_PARTS)
    assert recalled(mem, user_id, "now", NAME_PARTS)
    mem.kept_reports(user_id=user_id, session_id="now")  # its report written, not queued

    mem.forget(user_id=user_id, session_id="now")
    mem.forget(user_id=user_id, session_id="past")

    assert holders_of(NAME_PARTS) == []


@pytest.mark.slow
def test_another_users_forget_changes_no_recall_and_the_caches_fill_again(
    mem: Memory, user_id: str
) -> None:
    other = f"{user_id}-other"
    tell(mem, user_id, KEPT_PARTS)
    tell(mem, other, NAME_PARTS)
    assert recalled(mem, other, "now", NAME_PARTS)
    before = recalled(mem, user_id, "first", KEPT_PARTS)
    assert before

    mem.forget(user_id=other)
    assert retrieval.excerpt_text._remembered_terms.cache_info().currsize == 0
    after = recalled(mem, user_id, "second", KEPT_PARTS)

    assert after == before
    assert retrieval.excerpt_text._remembered_terms.cache_info().currsize > 0
    assert holders_of(NAME_PARTS) == []
    assert holders_of(KEPT_PARTS)  # the kept user's texts are cached again
