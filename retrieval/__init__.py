"""Long-term memory retrieval: embedders, cards, search (arrives with the cards issue)."""

__all__: list[str] = []
