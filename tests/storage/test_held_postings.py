"""The keyword ranking from postings held in this process (``retrieval.postings``) beside the
held vectors, behind ``CardRanking.candidates``.

With a user's vectors and postings held, the search statement reads only the version, the
card count, the keyword length and the query terms' document frequencies
(``storage.cards.search.statistics_sql``); the BM25 ranking runs here. It must rank exactly as
the statement's keyword ranking does, for a user with many cards and superseded ones, after
every write of another process, and a forgotten card must never come back from the cache.
"""

import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from card_samples import MODEL, new_card, unit_vector
from child_process import Spawn
from databases import crash_embedded

from retrieval.postings import HeldPostings
from retrieval.ranking import CardRanking
from storage import EMBEDDING_DIM, CardStore, Database, DatabaseUnavailableError
from storage.cards.search import statistics_sql
from storage.cards.store import Candidates, CardMatch
from storage.engine import stop_embedded
from storage.erasure import erase

WRITER = Path(__file__).with_name("card_writer_child.py")
QUERY = unit_vector("what did I say about the deploy")
# A common term (every card), middling ones, rare ones, and one no card holds.
TERM_SETS = [
    ["turn"],
    ["turn", "deploy", "berlin"],
    ["berlin", "team", "meet", "word3", "word17"],
    ["turn", "ask", "change", "deploy", "team", "meet", "word1", "nowhere"],
    ["word29", "word30", "word31"],
]


@pytest.fixture
def store(database: Database) -> CardStore:
    return CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)


@pytest.fixture
def ranking(store: CardStore) -> CardRanking:
    return CardRanking(store)


class Spy:
    """Records whether each ``CardStore.candidates`` call of a ranking used held postings."""

    def __init__(self, store: CardStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.postings_held: list[bool] = []
        search = store.candidates

        def candidates(*args: Any, **kwargs: Any) -> Candidates:
            self.postings_held.append(bool(kwargs.get("postings_held")))
            return search(*args, **kwargs)

        monkeypatch.setattr(store, "candidates", candidates)


def many_cards(store: CardStore, user_id: str, count: int) -> list[int]:
    """``count`` cards: every one says "turn", others a Zipf-like draw of a vocabulary, in
    varied frequencies and lengths."""
    pick = random.Random(11)
    vocabulary = ["deploy", "berlin", "team", "meet", "ask", "change"]
    vocabulary += [f"word{i}" for i in range(40)]
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
    cards = []
    for i in range(count):
        words = ["turn"] * pick.randint(1, 3)
        words += pick.choices(vocabulary, weights, k=pick.randint(0, 12))
        cards.append(new_card(" ".join([*words, f"card{i}"])))
    return [card.id for card in store.add(user_id, cards)]


def tie_groups(ranking: list[CardMatch]) -> list[tuple[float, list[int]]]:
    """A ranking as its runs of equal scores (to 12 digits), each run's ids as ranked; the
    last run's ids sorted. Scores equal in exact arithmetic can differ in their last bit by
    the order a card's terms were summed in, which the statement leaves to the order its rows
    arrive in; among them the ranking may differ, and at the cut, which of them are in it."""
    groups: list[tuple[float, list[int]]] = []
    for match in ranking:
        score = float(f"{match.score:.12g}")
        if groups and groups[-1][0] == score:
            groups[-1][1].append(match.card_id)
        else:
            groups.append((score, [match.card_id]))
    return [(score, sorted(ids)) for score, ids in groups[:-1]] + [
        (score, []) for score, _ in groups[-1:]
    ]


def assert_same_as_the_statement(
    ranking: CardRanking, user_id: str, spy: Spy, limit: int = 25
) -> None:
    """Every term set ranks as the statement's keyword ranking, from the held postings."""
    store = ranking.store
    for terms in TERM_SETS:
        spy.postings_held.clear()
        held = ranking.candidates(user_id, QUERY, terms, limit=limit)
        assert spy.postings_held[0], "the search did not use the held postings"
        statement = store.candidates(user_id, QUERY, terms, limit=limit)
        assert tie_groups(held.keyword) == tie_groups(statement.keyword)
        assert [m.score for m in held.keyword] == pytest.approx(
            [m.score for m in statement.keyword], rel=1e-12
        )
        assert [m.card_id for m in held.dense] == [m.card_id for m in statement.dense]
        assert held.similarity == pytest.approx(statement.similarity, abs=1e-5)
        assert (held.cards, held.version) == (statement.cards, statement.version)


def test_held_postings_rank_as_the_statement_for_many_cards(
    store: CardStore, ranking: CardRanking, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = many_cards(store, user_id, 1_500)
    # Superseded cards count in the statistics but are never ranked.
    [newer] = store.add(user_id, [new_card("a later statement")])
    for old in ids[:: len(ids) // 40]:
        store.supersede(user_id, old, newer.id)
    spy = Spy(store, monkeypatch)
    ranking.candidates(user_id, QUERY, ["turn"], limit=25)  # loads vectors and postings
    assert spy.postings_held == [False]

    assert_same_as_the_statement(ranking, user_id, spy)
    assert_same_as_the_statement(ranking, user_id, spy, limit=400)


def test_a_card_added_here_is_ranked_after_the_version_moved(
    store: CardStore, ranking: CardRanking, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    many_cards(store, user_id, 200)
    spy = Spy(store, monkeypatch)
    ranking.candidates(user_id, QUERY, ["turn"], limit=10)
    [added] = store.add(user_id, [new_card("deploy deploy deploy berlin word30")])

    found = ranking.candidates(user_id, QUERY, ["deploy", "word30"], limit=10)

    assert found.keyword[0].card_id == added.id
    assert_same_as_the_statement(ranking, user_id, spy)


@pytest.mark.slow
def test_every_write_of_another_process_is_seen_by_the_held_postings(
    spawn: Spawn,
    database_url: str,
    store: CardStore,
    ranking: CardRanking,
    user_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    [first, *_] = many_cards(store, user_id, 300)
    spy = Spy(store, monkeypatch)
    ranking.candidates(user_id, QUERY, ["turn"], limit=10)
    writer = spawn(WRITER, database_url, user_id)
    assert writer.read() == "ready"

    def write(line: str) -> str:
        writer.tell(line)
        return writer.read()

    def keyword_ids() -> list[int]:
        return [m.card_id for m in ranking.candidates(user_id, QUERY, ["word39"], limit=5).keyword]

    added = int(write("add word39 word39 word39 written elsewhere"))
    assert keyword_ids()[0] == added
    assert_same_as_the_statement(ranking, user_id, spy)
    assert write(f"supersede {added} {first}") == "done"
    assert added not in keyword_ids()
    assert_same_as_the_statement(ranking, user_id, spy)
    assert write(f"revive {added}") == "done"
    assert keyword_ids()[0] == added
    assert_same_as_the_statement(ranking, user_id, spy)  # counted once, not twice
    assert write(f"delete {added}") == "done"
    assert added not in keyword_ids()
    assert_same_as_the_statement(ranking, user_id, spy)
    assert writer.finish() == 0


def test_a_forgotten_card_never_comes_back_from_the_cache(
    store: CardStore, ranking: CardRanking, database: Database, user_id: str
) -> None:
    many_cards(store, user_id, 100)
    [secret] = store.add(user_id, [new_card("word38 word38 secret", vector=QUERY)])
    first = ranking.candidates(user_id, QUERY, ["word38"], limit=5)  # loads the cache
    assert ranking.vectors is not None and ranking.vectors.get(user_id) is not None
    assert first.keyword[0].card_id == secret.id and first.dense[0].card_id == secret.id
    again = ranking.candidates(user_id, QUERY, ["word38"], limit=5)  # from the cache
    assert again.keyword[0].card_id == secret.id

    erase(database, user_id, card_id=secret.id)  # another store's erasure: only the version
    forgotten = ranking.candidates(user_id, QUERY, ["word38", "secret"], limit=5)

    assert secret.id not in {m.card_id for m in [*forgotten.keyword, *forgotten.dense]}
    assert secret.id not in forgotten.similarity
    held = ranking.vectors.get(user_id)
    assert held is not None and secret.id not in held.ids

    erase(database, user_id)  # the whole user
    gone = ranking.candidates(user_id, QUERY, ["word38", "turn"], limit=5)
    assert (gone.dense, gone.keyword, gone.similarity, gone.cards) == ([], [], {}, 0)
    assert ranking.vectors.get(user_id) is None


def test_a_revived_card_is_counted_once_and_stale_rows_are_compacted() -> None:
    ids = np.arange(1, 11, dtype=np.int64)
    # Card i holds "tea" i times in a card of length i + 1; the even ones "milk" once.
    tea = np.array([[i, i, i + 1] for i in ids], dtype=np.int64)
    milk = np.array([[i, 1, i + 1] for i in ids if i % 2 == 0], dtype=np.int64)
    postings = HeldPostings({"tea": tea, "milk": milk})
    stats: dict[str, Any] = {"cards": 10, "keyword_length": 65, "limit": 10}
    counts = {"tea": 10, "milk": 5}

    def ranked(held: HeldPostings, current: np.ndarray) -> list[tuple[int, float]]:
        found = held.ranking(current, ["milk", "tea"], counts, **stats)
        return [(m.card_id, m.score) for m in found]

    everything = ranked(postings, ids)
    assert sorted(i for i, _ in everything) == ids.tolist()

    # Card 4 superseded: its rows stay (one stale card of nine) but are not ranked.
    nine = ids[ids != 4]
    without = postings.updated(nine, 1, np.empty(0, np.int64), {})
    assert without.nbytes == postings.nbytes
    assert ranked(without, nine) == [(i, s) for i, s in everything if i != 4]
    # Revived: read again with its postings, and counted once.
    revived = without.updated(ids, 0, np.array([4]), {"tea": tea[3:4], "milk": milk[1:2]})
    assert ranked(revived, ids) == everything
    # Four of ten gone: the stale rows are dropped.
    six = ids[ids > 4]
    compacted = revived.updated(six, 4, np.empty(0, np.int64), {})
    assert ranked(compacted, six) == [(i, s) for i, s in everything if i > 4]
    assert compacted.nbytes == (24 + 13) * (6 + 3)


def test_a_repeated_ranking_finds_the_rows_once_and_ranks_as_new_postings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = np.arange(1, 11, dtype=np.int64)
    tea = np.array([[i, i, i + 1] for i in ids], dtype=np.int64)
    milk = np.array([[i, 1, i + 1] for i in ids if i % 2 == 0], dtype=np.int64)
    postings = HeldPostings({"tea": tea, "milk": milk})
    searches = []
    searchsorted = np.searchsorted
    monkeypatch.setattr(
        np, "searchsorted", lambda *a, **k: searches.append(1) or searchsorted(*a, **k)
    )

    def ranked(held: HeldPostings, current: np.ndarray, cards: int) -> list[tuple[int, float]]:
        stats = {"cards": cards, "keyword_length": 65, "limit": 4}
        found = held.ranking(current, ["milk", "tea"], {"tea": 10, "milk": 5}, **stats)
        return [(m.card_id, m.score) for m in found]

    first = ranked(postings, ids, 10)
    assert len(searches) == 2
    assert ranked(postings, ids, 10) == first and len(searches) == 2  # remembered
    # Other statistics (a card written since): scored again, where the rows sit remembered.
    assert ranked(postings, ids, 11) == ranked(HeldPostings({"tea": tea, "milk": milk}), ids, 11)
    assert len(searches) == 4  # the fresh postings' two
    assert ranked(postings, ids, 10) == first
    # Other current cards (card 4 superseded): found again.
    nine = ids[ids != 4]
    assert ranked(postings, nine, 10) == ranked(HeldPostings({"tea": tea, "milk": milk}), nine, 10)


@pytest.fixture
def embedded(fresh_data_dir: Path) -> Iterator[tuple[Database, Database, Path]]:
    """A database on an embedded server of the test's own, which the test may take down:
    reached by URL (as a server elsewhere is: its next use fails rather than start it), and
    a handle on the data folder, whose next use starts it again; and the data folder."""
    holder = Database.open(None, data_dir=fresh_data_dir)
    assert holder.data_folder is not None
    database = Database.open(holder.url)
    yield database, holder, holder.data_folder
    database.close()
    holder.close()


@pytest.mark.parametrize("how", ["stop", "immediate", "kill"])
@pytest.mark.slow
def test_a_restart_while_the_postings_are_held_fails_the_search_and_the_next_ranks_right(
    embedded: tuple[Database, Database, Path],
    how: str,
    user_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    database, holder, folder = embedded
    store = CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)
    ranking = CardRanking(store)
    ids = many_cards(store, user_id, 300)
    spy = Spy(store, monkeypatch)
    ranking.candidates(user_id, QUERY, ["turn"], limit=10)  # loads vectors and postings
    assert_same_as_the_statement(ranking, user_id, spy)
    assert ranking.vectors is not None
    held = ranking.vectors.get(user_id)
    assert held is not None and held.postings is not None

    if how == "stop":
        stop_embedded(folder)
    else:
        crash_embedded(folder, how)
    # The statement cannot run: the search fails as the database's outage, not with a
    # ranking of the held cards alone (the version they are at is unknown until it answers).
    with pytest.raises(DatabaseUnavailableError):
        ranking.candidates(user_id, QUERY, ["word39"], limit=5)

    # The handle on the folder starts the server again: every card is there, and another
    # process writes one before this process searches again.
    elsewhere = CardStore(holder, model=MODEL, dimension=EMBEDDING_DIM)
    assert elsewhere.count(user_id) == len(ids)
    [added] = elsewhere.add(user_id, [new_card("word39 word39 word39 said after the restart")])
    spy.postings_held.clear()
    found = ranking.candidates(user_id, QUERY, ["word39"], limit=5)

    assert spy.postings_held == [True]  # the held postings, brought to the new version
    assert found.keyword[0].card_id == added.id
    assert found.cards == len(ids) + 1
    assert_same_as_the_statement(ranking, user_id, spy)


def test_the_statistics_read_the_query_vector_only_for_a_time_window() -> None:
    # Its text is made only then (``CardQueries._statistics``): 0.38 ms of every search.
    window = (datetime(2025, 5, 1, tzinfo=UTC), datetime(2025, 6, 1, tzinfo=UTC))
    assert ":query" not in statistics_sql(during=None)[0]
    assert ":query" in statistics_sql(during=window)[0]
