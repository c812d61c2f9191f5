"""Where near-duplicate cards merge: MiniLM similarity of paraphrases vs. different facts.

    python -m benchmarks.dedup [--threshold 0.9]

Embeds hand-written pairs of card texts with the real all-MiniLM-L6-v2 and prints the cosine
similarity distribution of each kind of pair, then the precision and recall of merging at the
chosen threshold (``retrieval.search.NEAR_DUPLICATE_SIMILARITY`` by default) and at a few
others, by cosine alone and by cosine plus the guard ``CardIndex.add`` applies: both texts have
the same keyword terms (stems, CJK bigrams; stop words and punctuation aside).

- ``same``: two wordings of one statement (what should merge).
- ``different``: two statements on the same subject and attribute with another value (a new
  city, a changed preference, another name): these must NOT merge, a newer one supersedes the
  older one instead. This is the side the threshold has to stay above.

The pairs are English and Chinese, written for this benchmark (MiniLM is an English model, so
Chinese pairs are reported apart: they embed poorly and sit close together whatever they say).
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence

from retrieval import SentenceTransformerEmbedder, term_frequencies
from retrieval.search import NEAR_DUPLICATE_SIMILARITY

SAME_EN = [
    ("User lives in Berlin", "The user lives in Berlin."),
    ("User's name is Ana", "The user's name is Ana."),
    ("User prefers tea over coffee", "User prefers tea over coffee."),
    ("The team uses Postgres for billing", "The team uses Postgres for billing."),
    ("User is allergic to peanuts", "The user is allergic to peanuts"),
    ("User works at Acme", "The user works at Acme."),
    ("User is 34 years old", "The user is 34 years old."),
    ("To do: send the invoice to Bob", "To do: send the invoice to Bob."),
    ("User likes hiking", "The user likes hiking."),
    ("User is a software engineer", "The user is a software engineer."),
    ("User's daughter is called Emma", "The user's daughter is called Emma."),
    ("User moved to Lisbon", "The user moved to Lisbon."),
    # Other words for the same statement: neither rule can tell these from a changed value.
    ("User lives in Berlin", "User is living in Berlin"),
    ("User relocated to Lisbon", "User moved to Lisbon"),
    ("User has a dog named Rex", "User's dog is called Rex"),
    ("User enjoys hiking", "User likes hiking"),
]
SAME_ZH = [
    ("用户住在北京", "用户住在北京。"),
    ("用户叫王芳", "用户叫王芳。"),
    ("用户喜欢喝茶", "用户喜欢喝茶。"),
    ("团队使用Postgres", "团队使用 Postgres"),
    ("用户在腾讯工作", "用户在腾讯工作。"),
    ("待办\uff1a交报告", "待办\uff1a交报告。"),
]
DIFFERENT_EN = [
    ("User lives in Berlin", "User lives in Lisbon"),
    ("User lives in Berlin", "User lives in Paris"),
    ("User moved to Berlin", "User moved to Lisbon"),
    ("User's name is Ana", "User's name is Maria"),
    ("User prefers tea", "User prefers coffee"),
    ("User likes cats", "User likes dogs"),
    ("User likes hiking", "User doesn't like hiking"),
    ("User works at Acme", "User works at Globex"),
    ("User is 34 years old", "User is 35 years old"),
    ("The team uses Postgres", "The team uses MySQL"),
    ("The team's database is Postgres", "The team's database is MongoDB"),
    ("User is a software engineer", "User is a data scientist"),
    ("User's daughter is called Emma", "User's daughter is called Lucy"),
    ("To do: send the invoice to Bob", "Done: send the invoice to Bob"),
    ("User is allergic to peanuts", "User is allergic to shellfish"),
    ("User is vegan", "User is vegetarian"),
    # The same words in another order: the guard cannot see it, only the cosine can.
    ("Ana reports to Bob", "Bob reports to Ana"),
]
DIFFERENT_ZH = [
    ("用户住在北京", "用户住在上海"),
    ("用户叫王芳", "用户叫李娜"),
    ("用户喜欢喝茶", "用户喜欢喝咖啡"),
    ("团队使用Postgres", "团队使用MySQL"),
    ("用户在腾讯工作", "用户在阿里巴巴工作"),
    ("用户30岁", "用户31岁"),
]


def cosine(first: Sequence[float], second: Sequence[float]) -> float:
    """The cosine similarity of two vectors."""
    dot = math.fsum(a * b for a, b in zip(first, second, strict=True))
    norm = math.sqrt(math.fsum(a * a for a in first) * math.fsum(b * b for b in second))
    return dot / norm


def similarities(
    embedder: SentenceTransformerEmbedder, pairs: Sequence[tuple[str, str]]
) -> list[float]:
    """The cosine similarity of each pair, in order."""
    vectors = embedder.embed([text for pair in pairs for text in pair])
    return [cosine(vectors[2 * i], vectors[2 * i + 1]) for i in range(len(pairs))]


def describe(name: str, values: Sequence[float]) -> str:
    """One line: the distribution of a kind of pair."""
    ordered = sorted(values)
    return (
        f"{name:<14} n={len(values):>2}  min {ordered[0]:.3f}  "
        f"median {statistics.median(ordered):.3f}  max {ordered[-1]:.3f}"
    )


def same_terms(pairs: Sequence[tuple[str, str]]) -> list[bool]:
    """Whether the two texts of each pair have the same keyword terms (``CardIndex``'s guard)."""
    return [set(term_frequencies(a)) == set(term_frequencies(b)) for a, b in pairs]


def merge_quality(
    same: Sequence[float],
    different: Sequence[float],
    threshold: float,
    same_guard: Sequence[bool] | None = None,
    different_guard: Sequence[bool] | None = None,
) -> str:
    """Precision and recall of "merge when similarity >= threshold" (and the guard holds)."""
    same_guard = same_guard or [True] * len(same)
    different_guard = different_guard or [True] * len(different)
    merged_right = sum(v >= threshold and g for v, g in zip(same, same_guard, strict=True))
    merged_wrong = sum(
        v >= threshold and g for v, g in zip(different, different_guard, strict=True)
    )
    merged = merged_right + merged_wrong
    precision = merged_right / merged if merged else 1.0
    recall = merged_right / len(same)
    return (
        f"threshold {threshold:.3f}: precision {precision:.2f}  recall {recall:.2f}  "
        f"(wrong merges {merged_wrong} of {len(different)})"
    )


def main() -> None:
    """Embed the pairs, print the distributions and the merge quality at a few thresholds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threshold", type=float, default=NEAR_DUPLICATE_SIMILARITY)
    arguments = parser.parse_args()
    embedder = SentenceTransformerEmbedder()
    kinds = {
        "same, en": similarities(embedder, SAME_EN),
        "same, zh": similarities(embedder, SAME_ZH),
        "different, en": similarities(embedder, DIFFERENT_EN),
        "different, zh": similarities(embedder, DIFFERENT_ZH),
    }
    for name, values in kinds.items():
        print(describe(name, values))
    print()
    for name, pairs, values in (
        ("different, en", DIFFERENT_EN, kinds["different, en"]),
        ("different, zh", DIFFERENT_ZH, kinds["different, zh"]),
    ):
        top = max(range(len(pairs)), key=lambda i: values[i])
        print(f"closest {name}: {values[top]:.3f} {pairs[top]}")
    print()
    same = kinds["same, en"] + kinds["same, zh"]
    different = kinds["different, en"] + kinds["different, zh"]
    same_guard = same_terms(SAME_EN + SAME_ZH)
    different_guard = same_terms(DIFFERENT_EN + DIFFERENT_ZH)
    thresholds = sorted({0.85, 0.9, 0.93, 0.95, 0.97, 0.99, arguments.threshold})
    print("cosine alone:")
    for threshold in thresholds:
        print("  " + merge_quality(same, different, threshold))
    print("cosine and the same keyword terms (what CardIndex.add does):")
    for threshold in thresholds:
        marker = "  <- NEAR_DUPLICATE_SIMILARITY" if threshold == NEAR_DUPLICATE_SIMILARITY else ""
        quality = merge_quality(same, different, threshold, same_guard, different_guard)
        print("  " + quality + marker)


if __name__ == "__main__":
    main()
