"""A child process adding one card on the parent's signal: ``cards_child.py URL USER SOURCE``."""

import sys

from card_samples import MODEL, new_card
from child_process import say, wait_for_go

from storage import CardStore, Database


def main(url: str, user_id: str, source: str) -> None:
    """Open the store, say ready, add the shared card (with this child's source) on ``go``."""
    with Database.open(url, pool_size=1) as database:
        store = CardStore(database, model=MODEL, dimension=384)
        wait_for_go()
        shared = new_card(
            "The team uses Postgres.", client_id=source, subject="team", attribute="database"
        )
        [card] = store.add(user_id, [shared])
        say(f"added {card.id}")


if __name__ == "__main__":
    main(*sys.argv[1:])
