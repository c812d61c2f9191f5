"""Recalled cards as the memories of a prompt: gated, taken apart into lines, merged, budgeted.

Turn cards overlap (each holds a message and its neighbours), so the best cards of a search
often share lines: sent as they are, the same line reached the prompt two or three times.
``compose_excerpts`` sends each line once:

1. **The gate** (``retrieval.relevance_gate``). A card is a candidate only when its cosine
   similarity to the query reaches the recipe's ``min_similarity`` or it holds
   ``min_keyword_share`` of the query's search terms; when nothing passes, nothing is sent.
2. **Lines.** A turn card is taken apart into its lines (one per source message). Each line
   gets a score from the best-ranked card holding it (``SearchConfig.line_*``): the card's
   rank, where the line sits against the card's best line (the one holding most query terms),
   whether it asks instead of telling (or repeats word for word what was said elsewhere:
   boilerplate), whether its speaker is someone the query names, and the share of the
   query's terms it holds. Any other card is one line.
3. **Cut lines** (``SearchConfig.trim_lines``). A turn line is cut to its sentences that hold
   the query's terms and the ``sentences_before`` / ``sentences_after`` (2 / 2) around each,
   ``…`` where sentences were left out; a line holding none (the context around the best
   line) is kept whole (``context_sentences`` 0). The memory still cites the whole message,
   so the cut must not drop the words that answer: cut to the matching sentence alone, and
   context lines to their first, more evidence fit the budget but fewer answers were said
   (BENCHMARKS.md, "Answer in the recalled text"). A recipe may cut lists and far lines
   closer and not count the speakers' names (``retrieval.close_cut``).
4. **Excerpts.** Lines are taken best first, every line of a stale card (one that holds a
   value that no longer holds, ``memory.longterm.validity``) after every other, its excerpt marked
   ``[until 4 April 2025]``; a line next to one already taken joins its
   excerpt (consecutive lines of one conversation are one memory, dated once), a line whose
   shown words were sent already is left out, and the walk stops at the first line that would
   start memory ``k + 1``; a line that would not fit the token budget is passed over for the
   later ones that fit (``fill_budget``), or ends the walk.

Pure: no database, no model, no token counting: a memory's tokens are the prompt's business
(its tokenizer, how it quotes a memory). ``pricing_excerpts`` asks for them as it goes (it yields
each memory's text and is sent its tokens: ``retrieval.excerpt_walk.Pricing``), so the layer that
counts answers with its own loop and hands nothing down; ``compose_excerpts`` answers with a
counting function it is given.
"""

import itertools
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from retrieval.close_cut import covered_terms, line_cutter, question_config
from retrieval.excerpt_text import asks, bare_question, line_terms
from retrieval.excerpt_walk import Line, Pricing, day_text, priced, render, walk, words_of
from retrieval.recipe import SearchConfig
from retrieval.relevance_gate import Gate, card_gate, card_terms, gate_threshold
from retrieval.search import ScoredCard
from retrieval.turns import day_label, split_turn_card

__all__ = ["Excerpt", "compose_excerpts", "pricing_excerpts"]


class Excerpt(BaseModel):
    """One memory for the prompt: consecutive lines of one conversation, or one other card.

    Attributes:
        text: The memory as the prompt shows it, its day first.
        cards: The cards its lines came from, best ranked first.
        ranks: Each card's rank among the search's candidates (1 is the best).
        gates: How each card passed the relevance gate.
        message_ids: The stored messages whose lines it holds, in order (for a card that
            cannot be taken apart, all of its sources).
        line_score: The score of its best line (``SearchConfig.line_*``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    cards: tuple[ScoredCard, ...]
    ranks: tuple[int, ...]
    gates: tuple[Gate, ...]
    message_ids: tuple[int, ...]
    line_score: float

    @property
    def score(self) -> float:
        """The fused search score of its best card."""
        return self.cards[0].score

    def reason(self) -> str:
        """Why it was chosen, in words: its best card's rank and gate, and what merged."""
        first = f"rank {self.ranks[0]}: {self.gates[0].describe()}"
        if len(self.cards) == 1:
            return first
        others = ", ".join(f"#{rank}" for rank in self.ranks[1:])
        return f"{first}; merged with the lines of {others}"


def compose_excerpts(
    hits: Sequence[ScoredCard],
    query_terms: Sequence[str],
    config: SearchConfig,
    *,
    k: int,
    max_tokens: int | None,
    count: Callable[[str], int],
    min_similarity: float | None = None,
    vouched: Mapping[int, str] | None = None,
    first: Collection[int] = (),
    stale_last: bool = True,
    newest_first: bool = False,
    question: str = "",
) -> list[Excerpt]:
    """The memories of a request, best first (see the module's docstring), each memory's
    tokens counted by ``count`` (``pricing_excerpts`` run by ``priced``).

    Args:
        hits: The search's cards in rank order (pins and cards to leave out removed).
        query_terms: The query's search terms (``CardIndex.terms``).
        config: The recipe: the gate, the line weights, how many cards to weigh.
        k: The most memories.
        max_tokens: The most tokens the memories may take together, or ``None``.
        count: The tokens one memory takes in the prompt, given its text.
        min_similarity: The gate's similarity if not the recipe's (a user's setting).
        vouched: Cards that pass the gate whatever their scores, with why: the caller brought
            them in (the current value of a fact a recalled memory holds an old value of).
        first: Cards that pass the gate and come first: the current card of a property the
            question names ("which company am I with?": the employer).
        stale_last: Send the lines of stale cards after every other (not for a question
            about the past, which asks for them).
        newest_first: Send the memories taken newest first (after ``first``, before the
            stale ones): for a question about the user's present, where a later statement
            may change an earlier one in words no rule reads.
        question: The query as written (``retrieval.close_cut.question_config``).

    Returns:
        At most ``k`` excerpts whose tokens (by ``count``) add up to at most ``max_tokens``.
    """
    return priced(
        pricing_excerpts(
            hits,
            query_terms,
            config,
            k=k,
            max_tokens=max_tokens,
            min_similarity=min_similarity,
            vouched=vouched,
            first=first,
            stale_last=stale_last,
            newest_first=newest_first,
            question=question,
        ),
        count,
    )


def pricing_excerpts(
    hits: Sequence[ScoredCard],
    query_terms: Sequence[str],
    config: SearchConfig,
    *,
    k: int,
    max_tokens: int | None,
    min_similarity: float | None = None,
    vouched: Mapping[int, str] | None = None,
    first: Collection[int] = (),
    stale_last: bool = True,
    newest_first: bool = False,
    question: str = "",
) -> Pricing[list[Excerpt]]:
    """``compose_excerpts`` as a ``Pricing``: it yields the text of each memory it weighs and
    is sent that memory's tokens in the prompt, then returns the excerpts.

    For a caller that counts tokens in a layer of its own (recall: ``memory.longterm``), so
    the walk never calls up into it. The arguments are ``compose_excerpts``'s but ``count``.
    """
    if k <= 0:
        return []
    config = question_config(config, question)
    wanted = set(query_terms)
    threshold = gate_threshold(wanted, config, min_similarity)
    candidates: list[tuple[ScoredCard, Gate, list[Line]]] = []
    lines: dict[tuple[str, int], Line] = {}
    for hit in hits:
        why = (vouched or {}).get(hit.card.id, "")
        if hit.card.id in first:
            why = "the current value of a property the question names"
        gate = card_gate(hit, wanted, threshold, config, vouched=why)
        if gate.passed:
            candidates.append((hit, gate, _lines_of(hit, lines, config)))
            if len(candidates) == config.excerpt_cards:
                break
    covered = covered_terms(wanted, (line for *_, parts in candidates for line in parts), config)
    # Each line is looked at once here, however many candidates hold it (overlapping turn
    # cards share most of their lines): what it says, whether it asks, whom it names.
    lines_weighed = {line.key: line for _, _, parts in candidates for line in parts}
    said: dict[str, set[tuple[str, int]]] = {}
    for line in lines_weighed.values():
        said.setdefault(words_of(line.text), set()).add(line.key)
    repeated = {key for keys in said.values() if len(keys) > 1 for key in keys}
    shape = {
        key: _shape(line, key in repeated, wanted, config) for key, line in lines_weighed.items()
    }
    asked = set(first)
    for position, (hit, _, parts) in enumerate(candidates):
        # What the question asks for (a property it names) is scored as the best card.
        rank = 0 if hit.card.id in asked else position
        _score_lines(position, rank, parts, covered, shape, config, hit.card.valid_to)
    firsts = {key for hit, _, parts in candidates if hit.card.id in asked for key in _keys(parts)}
    # What the question names comes first; what no longer holds after everything that does.
    order = sorted(
        {line.key: line for _, _, parts in candidates for line in parts}.values(),
        key=lambda line: (
            line.key not in firsts,
            stale_last and line.until is not None,
            -line.score,
            line.card,
        ),
    )
    groups = yield from walk(
        order,
        k=k,
        max_tokens=max_tokens,
        fill=config.fill_budget,
        cut=line_cutter(order, covered, config) if config.trim_lines else None,
    )
    if newest_first:
        groups = _newest_first(groups, firsts, candidates)
    return [_excerpt(group, candidates) for group in groups]


def _newest_first(
    groups: list[list[Line]],
    firsts: Collection[tuple[str, int]],
    candidates: list[tuple[ScoredCard, Gate, list[Line]]],
) -> list[list[Line]]:
    """The memories taken, newest first: what the question names first and stale ones last,
    as the walk had them. Which memories were taken does not change, only their order."""

    def said(line: Line) -> datetime:
        return candidates[line.card][0].card.observed_at  # when it was said, not what it dates

    return sorted(
        groups,
        key=lambda group: (
            not any(line.key in firsts for line in group),
            any(line.until is not None for line in group),
            -max(said(line) for line in group).timestamp(),
        ),
    )


def _keys(parts: Sequence[Line]) -> list[tuple[str, int]]:
    return [line.key for line in parts]


def _lines_of(
    hit: ScoredCard, known: dict[tuple[str, int], Line], config: SearchConfig
) -> list[Line]:
    """A card's lines (shared with the other cards holding them), or the card as one line."""
    card = hit.card
    when = card.occurred_at or card.observed_at
    split = (
        split_turn_card(card.text, len(card.source_message_ids))
        if card.type == "turn" and card.source_message_ids
        else None
    )
    until = f"until {day_text(card.valid_to)}" if card.valid_to is not None else None
    if split is None:
        text = card.text
        if card.type != "turn":
            text = (
                f"[{day_text(when)}, {until}] {text}"
                if until
                else f"{day_label(when.date())} {text}"
            )
        elif until:
            text = f"[{until}] {text}"
        key = ("card", card.id)
        if key not in known:
            terms = card_terms(hit, config)
            sources = tuple(card.source_message_ids)
            known[key] = Line(
                key,
                text,
                terms,
                None,
                sources,
                False,
                whole_turn=card.type == "turn",
                until=card.valid_to,  # shown in its text already
            )
        return [known[key]]
    parts = []
    for message_id, text in zip(card.source_message_ids, split.lines, strict=True):
        key = ("message", message_id)
        if key not in known:
            terms = line_terms(text, config)
            known[key] = Line(key, text, terms, split.day, (message_id,), True)
        parts.append(known[key])
    for before, after in itertools.pairwise(parts):
        before.neighbours.add(after.key)
        after.neighbours.add(before.key)
    return parts


def _shape(line: Line, repeated: bool, wanted: set[str], config: SearchConfig) -> tuple[bool, bool]:
    """Whether a line is named (its speaker is someone the query names) and whether it asks
    (a question, or boilerplate: said word for word elsewhere, ``repeated``); sets whether it
    may open a memory."""
    asking = line.turn and (asks(line.text) or repeated)
    line.opens = not (line.turn and (repeated or bare_question(line.text)))
    speaker, colon, _ = line.text.partition(": ")
    named = line.turn and bool(colon) and not wanted.isdisjoint(line_terms(speaker, config))
    return named, asking


def _score_lines(
    position: int,
    rank: int,
    parts: list[Line],
    covered: set[str],
    shape: dict[tuple[str, int], tuple[bool, bool]],
    config: SearchConfig,
    valid_to: datetime | None,
) -> None:
    """Give each line of the candidate at ``position`` (ranked ``rank``) its score, if better
    (and, from a stale card, until when what it says held: ``valid_to``). ``covered``: the
    query's terms a line's coverage counts (``wanted`` less the speakers' names, unless the
    recipe's ``names_cover``); ``shape``: each line's ``_shape``."""
    coverage = [
        len(covered.intersection(line.terms)) / len(covered) if covered else 0.0 for line in parts
    ]
    top = max(coverage)
    middle = len(parts) // 2
    best = middle if coverage[middle] == top else coverage.index(top)
    for index, line in enumerate(parts):
        offset = abs(index - best)
        placed = {0: 0.0, 1: config.line_after if index > best else config.line_before}
        named, asking = shape[line.key]
        score = (
            (config.line_speaker if named else 0.0)
            + config.line_rank * math.log1p(rank)
            + placed.get(offset, config.line_farther)
            + (config.line_question if asking else 0.0)
            + config.line_coverage * coverage[index]
        )
        if score > line.score:
            line.score, line.card = score, position
            if line.turn:
                line.until = valid_to


def _excerpt(
    lines: Sequence[Line], candidates: list[tuple[ScoredCard, Gate, list[Line]]]
) -> Excerpt:
    positions = sorted({line.card for line in lines})
    return Excerpt(
        text=render(lines),
        cards=tuple(candidates[p][0] for p in positions),
        ranks=tuple(p + 1 for p in positions),
        gates=tuple(candidates[p][1] for p in positions),
        message_ids=tuple(
            m for line in sorted(lines, key=lambda line: line.key) for m in line.message_ids
        ),
        line_score=max(line.score for line in lines),
    )
