"""``stratamem keys``: make, list and revoke the memory proxy's keys.

A key is shown once, as the last line of ``keys create`` (so a script takes it with
``tail -n 1``); only its hash is stored. ``keys list`` never shows a key.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from memory.cli.base import EXIT_OK, EXIT_UNAVAILABLE, CommandError, Subcommands, whole_number
from memory.proxy.keys import KeyRing
from memory.settings import Settings
from storage import Database, DatabaseUnavailableError
from storage.proxy_keys import ProxyKey, ProxyKeyStore

__all__ = ["register_keys"]


def register_keys(subcommands: Subcommands) -> None:
    """Add ``stratamem keys create | list | revoke``."""
    keys = subcommands.add_parser(
        "keys",
        help="make, list and revoke the keys clients of `stratamem serve` present",
        description="The memory proxy serves only requests with a stratamem key (unless it "
        "runs with --no-auth). A user key acts as its user only; an admin key may name any "
        "user with X-Stratamem-User. Keys are stored hashed: a key is shown once, when it is "
        "made.",
    )
    actions = keys.add_subparsers(dest="keys_action", required=True, metavar="ACTION")

    create = actions.add_parser(
        "create",
        help="make a key; it is printed once, as the last line",
        description="Make a key bound to one user (--user), or an admin key (--admin) that may "
        "name any user. The key is the last line of the output, shown once.",
    )
    owner = create.add_mutually_exclusive_group(required=True)
    owner.add_argument("--user", help="the user the key acts as (and only that user)")
    owner.add_argument("--admin", action="store_true", help="a key that may name any user")
    create.add_argument("--label", help="a note kept with the key (who holds it, where)")
    create.set_defaults(handler=_create)

    listing = actions.add_parser(
        "list", help="list the keys (never the keys themselves)", description="List the keys."
    )
    listing.add_argument("--user", help="only the keys of this user")
    listing.set_defaults(handler=_list)

    revoke = actions.add_parser(
        "revoke",
        help="revoke a key by its id; requests with it are refused from now on",
        description="Revoke a key by its id (see `stratamem keys list`): the next request "
        "that presents it is a 401, on every proxy.",
    )
    revoke.add_argument("id", type=whole_number(1), help="the key's id")
    revoke.set_defaults(handler=_revoke)


@contextmanager
def _key_store() -> Iterator[ProxyKeyStore]:
    settings = Settings()
    try:
        database = Database.open(settings.database_url, data_dir=settings.data_dir, pool_size=1)
    except DatabaseUnavailableError as error:
        raise CommandError(f"cannot reach the database: {error}", EXIT_UNAVAILABLE) from error
    with database:
        yield ProxyKeyStore(database)


def _create(args: argparse.Namespace, out: Console) -> int:
    with _key_store() as store:
        key, record = KeyRing(store).create(
            user_id=None if args.admin else args.user, label=args.label
        )
    out.print(
        f"Made key {record.id}, {escape(_owner(record))}. It is shown once, below: keep it "
        f"now (only its hash is stored); `stratamem keys revoke {record.id}` ends it.",
        highlight=False,
        soft_wrap=True,
    )
    # Plain print: no markup, no wrapping, nothing after it.
    print(key, file=out.file, flush=True)
    return EXIT_OK


def _list(args: argparse.Namespace, out: Console) -> int:
    with _key_store() as store:
        keys = store.list(user_id=args.user)
    if not keys:
        out.print("No keys." + (" Make one with `stratamem keys create`." if not args.user else ""))
        return EXIT_OK
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("id", "for", "label", "created", "state"):
        table.add_column(column, justify="right" if column == "id" else "left")
    for record in keys:
        state = (
            "valid" if record.revoked_at is None else f"revoked {record.revoked_at:%Y-%m-%d %H:%M}"
        )
        table.add_row(
            str(record.id),
            escape(_owner(record)),
            escape(record.label or ""),
            f"{record.created_at:%Y-%m-%d %H:%M}",
            state,
        )
    out.print(table)
    return EXIT_OK


def _revoke(args: argparse.Namespace, out: Console) -> int:
    with _key_store() as store:
        record = store.revoke(args.id)
    if record is None:
        raise CommandError(f"there is no key {args.id} (see `stratamem keys list`)")
    out.print(
        f"Revoked key {record.id}, {escape(_owner(record))}.", highlight=False, soft_wrap=True
    )
    return EXIT_OK


def _owner(record: ProxyKey) -> str:
    return "an admin key" if record.admin else f"for user {record.user_id!r}"
