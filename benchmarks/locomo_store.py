"""LoCoMo recall through the real ``CardIndex``/``CardStore`` on an embedded Postgres (MiniLM).

Used by ``python -m benchmarks.locomo_retrieval --store``: the method the harness measured in
memory, run as the product runs it, so both numbers can be compared.
"""

import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import tiktoken

from benchmarks.locomo_retrieval import Card, Conversation, Result, build_cards, full_tokens
from retrieval import (
    MINILM_DIMENSION,
    MINILM_NAME,
    CardDraft,
    CardIndex,
    CardQuery,
    SentenceTransformerEmbedder,
)
from storage import CardStore, Database

__all__ = ["run_store"]


def run_store(
    conversations: list[Conversation],
    *,
    k: int,
    encoding: tiktoken.Encoding,
    data_dir: Path | None = None,
) -> Result:
    """Ingest every conversation as one user's turn cards, search every question, score it."""
    result = Result()
    with tempfile.TemporaryDirectory(prefix="stratamem-locomo-") as scratch:
        database = Database.open(None, data_dir=data_dir or Path(scratch))
        try:
            index = CardIndex(
                CardStore(database, model=MINILM_NAME, dimension=MINILM_DIMENSION),
                SentenceTransformerEmbedder(),
            )
            run = f"{time.time_ns()}"
            for conversation in conversations:
                user_id = f"locomo-{conversation.sample_id}-{run}"
                cards = build_cards(conversation, before=1, after=1)
                index.add(user_id, [_draft(conversation, card) for card in cards])
                full = full_tokens(conversation, encoding)
                for question in conversation.questions:
                    top = index.search(user_id, question.text, CardQuery(k=k))
                    found = {s for hit in top for s in hit.card.source_client_ids}
                    hits = sum(1 for e in question.evidence if e in found)
                    result.recall[question.category].append(hits / len(question.evidence))
                    first = next(
                        (
                            rank
                            for rank, hit in enumerate(top)
                            if set(hit.card.source_client_ids) & set(question.evidence)
                        ),
                        None,
                    )
                    result.mrr.append(0.0 if first is None else 1 / (first + 1))
                    tokens = sum(len(encoding.encode(hit.card.text)) for hit in top)
                    result.share.append(tokens / full)
        finally:
            database.close()
    return result


def _draft(conversation: Conversation, card: Card) -> CardDraft:
    """The turn card of the harness, as the product stores it."""
    turn = next(t for t in conversation.turns if t.dia_id in card.sources)
    return CardDraft(
        type="turn",
        text=card.text,
        session_id=f"session_{turn.session}",
        source_client_ids=list(card.sources),
        observed_at=_day(turn.date),
    )


def _day(text: str) -> datetime | None:
    """Parse ``8 May 2023``; None when the session has no date."""
    try:
        return datetime.strptime(text, "%d %B %Y").replace(tzinfo=UTC)
    except ValueError:
        return None
