"""``StratamemRetriever``: a LangChain retriever over a user's stratamem memories (cards).

``StratamemRetriever(memory=mem, user_id="u1", k=4).invoke("which database do we use?")``
returns the user's ``k`` best-matching cards as ``Document``s, by ``Memory.search`` (vectors and
keywords fused, every filter in SQL, never another user's card): ``page_content`` is the card's
text, ``id`` its card id, and ``metadata`` the card's type, dates, validity, session, sources
and scores. ``k`` and the filters can also be given per call: ``invoke(query, k=2)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from memory.facade import Memory
from retrieval import ScoredCard
from storage import CardType

__all__ = ["StratamemRetriever"]


class StratamemRetriever(BaseRetriever):
    """The user's memories matching a query, best first (see the module docstring).

    Attributes:
        memory: The open ``Memory`` (long-term memory on).
        user_id: Whose memories; no other user's are ever returned.
        k: How many documents at most.
        types: Only cards of these types (``fact``, ``preference``, ``turn``, ...).
        session_id: Only cards of this session.
        min_score: Drop cards whose cosine similarity to the query is below this.
        include_superseded: Also return cards a newer fact replaced.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Memory
    user_id: str
    k: int = 4
    types: Sequence[CardType] | None = None
    session_id: str | None = None
    min_score: float | None = None
    include_superseded: bool = False

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **overrides: Any
    ) -> list[Document]:
        """Search the user's cards; ``overrides`` replace this retriever's ``k`` and filters
        for one call.

        Raises:
            storage.InvalidInputError: ``k`` or a filter is not usable.
            TypeError: an override names no field of the retriever.
        """
        unknown = set(overrides) - {"k", "types", "session_id", "min_score", "include_superseded"}
        if unknown:
            raise TypeError(f"StratamemRetriever takes no argument {sorted(unknown)[0]!r}")
        asked = {
            "k": self.k,
            "types": self.types,
            "session_id": self.session_id,
            "min_score": self.min_score,
            "include_superseded": self.include_superseded,
            **overrides,
        }
        found = self.memory.search(user_id=self.user_id, query=query, **asked)
        return [_document(hit) for hit in found]


def _document(hit: ScoredCard) -> Document:
    card = hit.card
    metadata: dict[str, Any] = {
        "card_id": card.id,
        "type": card.type,
        "score": hit.score,
        "similarity": hit.similarity,
        "keyword_score": hit.keyword_score,
        "session_id": card.session_id,
        "topic": card.topic,
        "tags": list(card.tags),
        "pinned": card.pinned,
        "source_client_ids": list(card.source_client_ids),
        "observed_at": _iso(card.observed_at),
        "occurred_at": _iso(card.occurred_at),
        "valid_from": _iso(card.valid_from),
        "valid_to": _iso(card.valid_to),
        "superseded_by": card.superseded_by,
    }
    return Document(page_content=card.text, metadata=metadata, id=str(card.id))


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None
