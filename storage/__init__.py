"""Persistence for stratamem: Postgres with pgvector, embedded or by URL, behind typed records.

The names of this package are those of ``storage.api``, loaded on first use: importing one of
its modules alone loads that module only. ``storage.errors`` holds ``StratamemError``, the root
of every error stratamem raises, and the pure ``memory.context`` reaches it (through
``memory.errors``) without loading SQLAlchemy, the driver or the stores.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.api import *  # noqa: F403
else:

    def __getattr__(name: str) -> object:
        """A name of ``storage.api`` (or a module it imported), loaded on first use."""
        if name.startswith("__") and name != "__all__":
            raise AttributeError(f"module 'storage' has no attribute {name!r}")
        api = importlib.import_module("storage.api")
        if name == "__all__" or name in api.__all__:
            value = getattr(api, name)
        elif name in globals():  # a module of the package, bound here when api imported it
            value = globals()[name]
        else:
            raise AttributeError(f"module 'storage' has no attribute {name!r}")
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *importlib.import_module("storage.api").__all__})
