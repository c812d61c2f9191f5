"""Recall at equal token budgets, and the turn-level baselines it is compared with.

Pure: no database, no model. A method's results (``Recalled``: a text and the dialog ids it
holds) are taken in rank order until a token budget is spent: the first result that does not
fit ends the list, so a long result is never skipped for shorter ones after it. Each evidence
turn counts once, however many results hold it. The tokens are those each result takes in
the prompt, counted by the caller's function (the project's tiktoken counter on the memory's
line as the prompt carries it).

The baselines rank single turns (``[8 May 2023] Speaker: text``, one result each) by BM25
over ``retrieval.analyze``'s terms, by the cosine of given vectors (MiniLM in the command),
or by both fused with reciprocal rank (1:1).

Beside evidence recall, each budget reports *answer in text* (``memory.eval.answers``): for
the questions whose gold answer is at most four words, the share whose answer appears in the
text taken (recall counts the turns a memory cites, which stay cited when a line is cut).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

import numpy as np

from memory.eval.answers import answer_in_text, checkable_answer
from memory.eval.locomo import CATEGORIES, Conversation, Question, Recalled, turn_line
from retrieval import analyze, day_label, weighted_rrf

__all__ = [
    "BUDGETS",
    "BudgetRow",
    "BudgetScore",
    "TurnBaselines",
    "repeated_share",
    "score_budgets",
    "summarize_budgets",
    "take_budget",
    "turn_results",
]

#: Tokens of recalled text at which recall is reported.
BUDGETS = (256, 512, 1024, 2048)


def take_budget(
    results: Sequence[Recalled], budget: int, count: Callable[[str], int]
) -> list[Recalled]:
    """The results in rank order until ``budget`` tokens are spent (the first that does not
    fit ends the list)."""
    taken: list[Recalled] = []
    spent = 0
    for result in results:
        spent += count(result.text)
        if spent > budget:
            break
        taken.append(result)
    return taken


def repeated_share(results: Sequence[Recalled], count: Callable[[str], int]) -> float:
    """The share of the results' tokens in lines that an earlier line of them said already.

    A line is compared without its day label and case; 0 when no line repeats.
    """
    seen: set[str] = set()
    total = repeated = 0
    for result in results:
        for line in _lines(result.text):
            tokens = count(line)
            total += tokens
            if line in seen:
                repeated += tokens
            seen.add(line)
    return repeated / total if total else 0.0


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[0].startswith("[") and "] " in lines[0]:
        lines[0] = lines[0].split("] ", 1)[1]
    return [" ".join(line.split()).casefold() for line in lines if line.strip()]


@dataclass(frozen=True, slots=True)
class BudgetScore:
    """How one method did for one question: recall per budget and at ``k`` results.

    Attributes:
        category: The question's category.
        recall: Evidence recall per budget (tokens), and under the key ``"k"`` at k results.
        tokens: The tokens taken per budget, and at k results.
        repeated: The share of the tokens taken that repeat a line, per budget and at k.
        answered: Per budget and at k, 1.0 when the gold answer appears in the text taken,
            0.0 when not; empty when the answer is not checkable by containment.
    """

    category: int
    recall: Mapping[int | str, float]
    tokens: Mapping[int | str, int]
    repeated: Mapping[int | str, float]
    answered: Mapping[int | str, float] = field(default_factory=dict)


def score_budgets(
    question: Question,
    budgets: Mapping[int, Sequence[Recalled]],
    at_k: Sequence[Recalled],
    count: Callable[[str], int],
) -> BudgetScore:
    """Score one question: for each budget the results given for it, cut to the budget (a
    method may answer each budget apart, as ``prepare`` with its own token budget does), and
    the first-``k`` results."""
    taken: dict[int | str, list[Recalled]] = {
        budget: take_budget(results, budget, count) for budget, results in budgets.items()
    }
    taken["k"] = list(at_k)
    evidence = set(question.evidence)
    answer = checkable_answer(question.answer)
    return BudgetScore(
        category=question.category,
        recall={
            key: sum(1 for e in evidence if any(e in r.sources for r in results)) / len(evidence)
            for key, results in taken.items()
        },
        tokens={key: sum(count(r.text) for r in results) for key, results in taken.items()},
        repeated={key: repeated_share(results, count) for key, results in taken.items()},
        answered={}
        if answer is None
        else {
            key: float(answer_in_text(answer, (r.text for r in results)))
            for key, results in taken.items()
        },
    )


@dataclass(frozen=True, slots=True)
class BudgetRow:
    """Means over a group of questions (a category, or all of them) for one method."""

    name: str
    questions: int
    recall: dict[int | str, float] = field(default_factory=dict)
    tokens: dict[int | str, float] = field(default_factory=dict)
    repeated: dict[int | str, float] = field(default_factory=dict)
    answerable: int = 0
    answered: dict[int | str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The row as a JSON object (without its name); budgets are string keys."""
        return {
            "questions": self.questions,
            "recall": {str(key): value for key, value in self.recall.items()},
            "tokens": {str(key): value for key, value in self.tokens.items()},
            "repeated": {str(key): value for key, value in self.repeated.items()},
            "answerable": self.answerable,
            "answer_in_text": {str(key): value for key, value in self.answered.items()},
        }


def summarize_budgets(scores: Sequence[BudgetScore]) -> list[BudgetRow]:
    """One row per category that has questions (in ``CATEGORIES`` order), then ``overall``."""
    categories = sorted({s.category for s in scores}, key=lambda c: (c not in CATEGORIES, c))
    rows = [
        _row(CATEGORIES.get(c, f"category {c}"), [s for s in scores if s.category == c])
        for c in categories
    ]
    return [*rows, _row("overall", scores)]


def _row(name: str, scores: Sequence[BudgetScore]) -> BudgetRow:
    if not scores:
        return BudgetRow(name, 0)
    keys = list(scores[0].recall)
    checked = [s for s in scores if s.answered]
    return BudgetRow(
        name,
        len(scores),
        recall={key: fmean(s.recall[key] for s in scores) for key in keys},
        tokens={key: fmean(s.tokens[key] for s in scores) for key in keys},
        repeated={key: fmean(s.repeated[key] for s in scores) for key in keys},
        answerable=len(checked),
        answered={key: fmean(s.answered[key] for s in checked) for key in keys} if checked else {},
    )


# --- turn-level baselines ---------------------------------------------------------------------


def turn_results(conversation: Conversation) -> list[Recalled]:
    """Every turn as one result: ``[8 May 2023] Speaker: text``, its dialog id its source."""
    results = []
    for session in conversation.sessions:
        day = f"{day_label(session.time.date())} " if session.time is not None else ""
        results += [Recalled(day + turn_line(t), (t.dia_id,)) for t in session.turns]
    return results


class TurnBaselines:
    """One conversation's turns ranked by BM25, by vector cosine, and by both fused.

    BM25 is Okapi (k1 1.2, b 0.75) over ``retrieval.analyze``'s terms of each turn's text as
    shown (its day and speaker included), the formula of the card store's keyword search.
    """

    def __init__(self, turns: Sequence[Recalled], vectors: Sequence[Sequence[float]]) -> None:
        """Index ``turns``; ``vectors`` are their unit-length embeddings, in order."""
        self.turns = list(turns)
        self._vectors = np.asarray(vectors, dtype=np.float32).reshape(len(self.turns), -1)
        self._terms = [Counter(analyze(turn.text)) for turn in self.turns]
        self._lengths = [sum(terms.values()) for terms in self._terms]
        self._average = fmean(self._lengths) if self._lengths else 0.0
        self._frequency: Counter[str] = Counter()
        for terms in self._terms:
            self._frequency.update(terms.keys())

    def bm25(self, query: str) -> list[Recalled]:
        """The turns holding any of the query's terms, best BM25 first."""
        k1, b, n = 1.2, 0.75, len(self._terms)
        wanted = set(analyze(query))
        scores: dict[int, float] = {}
        for index, terms in enumerate(self._terms):
            score = 0.0
            for term in wanted & terms.keys():
                df = self._frequency[term]
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                norm = k1 * (1 - b + b * self._lengths[index] / (self._average or 1.0))
                score += idf * terms[term] * (k1 + 1) / (terms[term] + norm)
            if score > 0:
                scores[index] = score
        return [self.turns[i] for i in sorted(scores, key=lambda i: (-scores[i], i))]

    def dense(self, query_vector: Sequence[float]) -> list[Recalled]:
        """Every turn, the most similar to the query's vector first."""
        cosine = self._vectors @ np.asarray(query_vector, dtype=np.float32)
        return [self.turns[int(i)] for i in np.argsort(-cosine, kind="stable")]

    def fused(self, query: str, query_vector: Sequence[float]) -> list[Recalled]:
        """BM25 and vector rankings fused by reciprocal rank, 1:1 (k = 60)."""
        position = {id(turn): index for index, turn in enumerate(self.turns)}
        rankings = [
            [position[id(t)] for t in self.bm25(query)],
            [position[id(t)] for t in self.dense(query_vector)],
        ]
        return [self.turns[i] for i, _ in weighted_rrf(rankings, [1.0, 1.0])]
