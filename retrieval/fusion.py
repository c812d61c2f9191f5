"""Rank fusion: one ranking out of several, by weighted reciprocal rank."""

from collections.abc import Hashable, Sequence
from typing import TypeVar

__all__ = ["DEFAULT_RRF_K", "weighted_rrf"]

#: The usual RRF constant: the contribution of rank r is ``weight / (DEFAULT_RRF_K + r)``.
DEFAULT_RRF_K = 60

Key = TypeVar("Key", bound=Hashable)


def weighted_rrf(
    rankings: Sequence[Sequence[Key]], weights: Sequence[float], *, k: int = DEFAULT_RRF_K
) -> list[tuple[Key, float]]:
    """Fuse rankings by weighted reciprocal rank: ``score = sum(w / (k + rank))``, rank from 1.

    Only ranks are used, never raw scores, so a cosine similarity and a BM25 score (which has
    no fixed scale) can be fused without calibrating one against the other.

    Args:
        rankings: Each a sequence of keys, best first; a key may be missing from some.
        weights: One weight per ranking.
        k: The RRF constant; larger flattens the difference between top ranks.

    Returns:
        Every key with its fused score, best first; ties keep the order of first appearance.

    Raises:
        ValueError: ``rankings`` and ``weights`` differ in length.
    """
    if len(rankings) != len(weights):
        raise ValueError(f"{len(rankings)} rankings but {len(weights)} weights")
    scores: dict[Key, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda item: -item[1])
