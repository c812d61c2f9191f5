"""A child process writing one user's cards on the parent's word: ``card_writer_child.py URL USER``.

Each line the parent writes is one write, answered with one line: ``add TEXT`` (the new card's
id), ``supersede OLD NEW``, ``revive ID`` and ``delete ID`` (``done``). It keeps a cache of its
own, like any process searching the same user.
"""

import sys

from card_samples import MODEL, new_card
from child_process import say, wait_for_line

from storage import CardStore, Database


def main(url: str, user_id: str) -> None:
    """Answer writes until the parent closes stdin."""
    with Database.open(url, pool_size=1) as database:
        store = CardStore(database, model=MODEL, dimension=384)
        say("ready")
        while line := wait_for_line().strip():
            command, _, rest = line.partition(" ")
            if command == "add":
                [card] = store.add(user_id, [new_card(rest)])
                say(str(card.id))
                continue
            if command == "supersede":
                old, new = rest.split()
                store.supersede(user_id, int(old), int(new))
            elif command == "revive":
                store.revive(user_id, int(rest))
            elif command == "delete":
                store.delete(user_id, card_id=int(rest))
            say("done")


if __name__ == "__main__":
    main(*sys.argv[1:])
