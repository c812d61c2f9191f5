"""Sample cards shared by the card-store tests and their child process."""

import hashlib
import math
from typing import Any

from storage import EMBEDDING_DIM, NewCard

#: The model name the card-store tests record (the one the rest of the suite uses too).
MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def unit_vector(seed: str) -> list[float]:
    """A deterministic pseudo-random unit vector."""
    values: list[float] = []
    counter = 0
    while len(values) < EMBEDDING_DIM:
        digest = hashlib.sha256(f"{seed}/{counter}".encode()).digest()
        values.extend((byte - 127.5) for byte in digest)
        counter += 1
    values = values[:EMBEDDING_DIM]
    length = math.sqrt(sum(v * v for v in values))
    return [v / length for v in values]


def new_card(
    text: str, *, client_id: str | None = None, vector: list[float] | None = None, **fields: Any
) -> NewCard:
    """A card whose vector derives from its text and whose terms are its lower-case words."""
    terms: dict[str, int] = {}
    for word in text.lower().replace(".", " ").split():
        terms[word] = terms.get(word, 0) + 1
    return NewCard(
        text=text,
        embedding=vector if vector is not None else unit_vector(text),
        terms=terms,
        source_client_ids=[client_id] if client_id else [],
        **{"type": "fact", **fields},
    )
