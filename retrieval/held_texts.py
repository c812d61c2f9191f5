"""What this process holds of users' texts outside the database, and forgetting it.

Caches that keep what a user wrote (a line, a query, a word, the terms and vectors of a user's
cards) register here how they forget it, and ``Memory.forget`` calls ``forget_held_texts``
once the database has erased the rows, so that a forgotten name is no longer in this process's
memory. A cache keyed by text (``hold_cache``) is emptied whole: it only saves work, it cannot
tell one user's texts from another's, and a forget is rare. A holder kept by user (a ranking's
held vectors and postings, the recent windows of a ``Memory``) drops that user only.

Only this process: another process keeps its caches until they are evicted, and never serves
a forgotten card or message from them (``docs/security.md``, "Erasure").
"""

import inspect
import threading
import weakref
from collections.abc import Callable
from typing import Protocol, TypeVar

__all__ = ["forget_held_texts", "hold_cache", "hold_texts"]

#: Forgets what its holder keeps of one user's texts, given the user id.
Forget = Callable[[str], None]


class _Cache(Protocol):
    def cache_clear(self) -> None: ...


_CacheT = TypeVar("_CacheT", bound=_Cache)

# Module-level, as the lru_cache functions it empties are: one registry for the process.
_lock = threading.Lock()
#: Every registered forget: a function, or a bound method held weakly.
_forgets: list[Forget | weakref.WeakMethod[Forget]] = []


def hold_texts(forget: Forget) -> None:
    """Register ``forget(user_id)``, called by every ``forget_held_texts`` from now on.

    A bound method is held weakly: registering never keeps its object (a ``Memory``'s cache)
    alive, and it is left out once the object is gone.
    """
    held = weakref.WeakMethod[Forget](forget) if inspect.ismethod(forget) else forget
    with _lock:
        _forgets[:] = [each for each in _forgets if _live(each) is not None]
        _forgets.append(held)


def hold_cache(cache: _CacheT) -> _CacheT:
    """Register a ``functools.lru_cache`` function (a decorator, above ``@lru_cache``): every
    ``forget_held_texts`` empties it whole."""
    hold_texts(lambda _user_id: cache.cache_clear())
    return cache


def forget_held_texts(user_id: str) -> None:
    """Make every registered holder of this process forget ``user_id``'s texts (the caches
    keyed by text: all of theirs)."""
    with _lock:
        forgets = [forget for forget in map(_live, _forgets) if forget is not None]
    for forget in forgets:
        forget(user_id)


def _live(held: Forget | weakref.WeakMethod[Forget]) -> Forget | None:
    """The registered forget, or None when it was a method of an object gone since."""
    return held() if isinstance(held, weakref.WeakMethod) else held
