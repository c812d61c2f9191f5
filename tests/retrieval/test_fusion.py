"""Tests of weighted reciprocal rank fusion."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrieval import weighted_rrf


def test_agreement_wins_and_weights_tilt_the_order() -> None:
    fused = dict(weighted_rrf([["a", "b", "c"], ["b", "d"]], [1.0, 1.0]))
    assert max(fused, key=fused.__getitem__) == "b"

    only_first = [key for key, _ in weighted_rrf([["a"], ["d"]], [1.0, 2.0])]
    assert only_first == ["d", "a"]


def test_scores_are_the_formula() -> None:
    assert weighted_rrf([[7, 8]], [2.0], k=10) == [(7, 2 / 11), (8, 2 / 12)]


def test_mismatched_weights_are_an_error() -> None:
    with pytest.raises(ValueError, match="2 rankings but 1 weights"):
        weighted_rrf([[1], [2]], [1.0])


@given(st.lists(st.lists(st.integers(0, 20), unique=True), min_size=1, max_size=3))
def test_every_key_appears_once_best_first(rankings: list[list[int]]) -> None:
    fused = weighted_rrf(rankings, [1.0] * len(rankings))
    keys = [key for key, _ in fused]
    assert sorted(keys) == sorted({key for ranking in rankings for key in ranking})
    scores = [score for _, score in fused]
    assert scores == sorted(scores, reverse=True)
