"""The registry of the caches that hold users' texts: who is called, and who is not kept."""

from __future__ import annotations

import gc
import weakref
from functools import lru_cache

import pytest

from retrieval import held_texts
from retrieval.held_texts import forget_held_texts, hold_cache, hold_texts


@pytest.fixture(autouse=True)
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test registers into an empty registry of its own (the process's stays as it was)."""
    monkeypatch.setattr(held_texts, "_forgets", [])


class Holder:
    def __init__(self) -> None:
        self.forgotten: list[str] = []
        hold_texts(self.forget)

    def forget(self, user_id: str) -> None:
        self.forgotten.append(user_id)


def test_every_holder_is_told_the_user_and_a_cache_is_emptied() -> None:
    holder = Holder()
    told: list[str] = []
    hold_texts(told.append)

    @hold_cache
    @lru_cache(maxsize=8)
    def terms(text: str) -> str:
        return text.lower()

    terms("Alice Smith")
    assert terms.cache_info().currsize == 1

    forget_held_texts("u1")

    assert holder.forgotten == ["u1"] and told == ["u1"]
    assert terms.cache_info().currsize == 0
    assert terms("Alice Smith") == "alice smith"  # and it fills again


def test_a_holders_object_is_not_kept_alive_by_the_registry() -> None:
    holder = Holder()
    gone: list[bool] = []
    weakref.finalize(holder, gone.append, True)
    del holder
    gc.collect()

    assert gone == [True]
    forget_held_texts("u1")  # the gone holder is left out
    kept = Holder()  # registering leaves the gone one out of the registry
    assert len(held_texts._forgets) == 1
    forget_held_texts("u2")
    assert kept.forgotten == ["u2"]
