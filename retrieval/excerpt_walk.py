"""The walk that turns ranked lines into excerpts (``retrieval.excerpts``).

Lines are taken best first. A line next to one already taken joins its excerpt (consecutive
lines of one conversation are one memory), through lines left out as repeats; a line said
word for word already is left out; a bare question or boilerplate never opens a memory and
waits until a line next to it is taken; the walk ends at the first line that would open
memory ``k + 1`` or would not fit the token budget.

The walk does not count tokens itself: what a memory costs is the prompt's business (its
tokenizer, how a memory is quoted), one layer up. It is a generator that yields the text of
each memory it weighs and is sent that memory's tokens (``Pricing``). ``Questions`` holds the
one loop that drives it: its caller iterates over the memories asked about and answers each in
its own frame, so no function of a layer above is ever handed down; ``priced`` is that loop
answered with a counting function of this layer's callers.
"""

import math
from collections.abc import Callable, Collection, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, TypeVar

from retrieval.turns import day_text

__all__ = [
    "Line",
    "Pricing",
    "Questions",
    "day_text",
    "priced",
    "render",
    "shown_words",
    "walk",
    "words_of",
]

T = TypeVar("T")

#: A computation that needs the tokens of memories: it yields a memory's text as the prompt
#: would show it and is sent back its tokens, until it returns its result.
Pricing = Generator[str, int, T]


@dataclass
class Line:
    """A line of the candidates: text, sources, and the best score any card gave it.

    Attributes:
        key: ``("message", id)`` for a line of a turn card, ``("card", id)`` for a whole card.
        text: What was said (``Speaker: text``, or a whole card with its day).
        terms: Its distinct search terms.
        day: The day label of the turn card it came from.
        message_ids: Its source messages.
        turn: Whether it is a line of a turn card.
        score: The best score a card gave it.
        card: The position of that card among the candidates.
        opens: Whether it may open a memory.
        whole_turn: A turn card that could not be split (sent whole, once).
        until: The end of its validity when the card that gave its score holds a value that
            no longer holds (``memory.longterm.validity``); the excerpt shows it first.
        neighbours: The lines next to it in the conversation.
        shown: What the prompt shows of it, when not all of ``text`` (cut to the sentences
            that hold the query's words); repeats are still told by ``text``.
    """

    key: tuple[str, int]
    text: str
    terms: Collection[str]
    day: str | None
    message_ids: tuple[int, ...]
    turn: bool
    score: float = -math.inf
    card: int = -1  # position of the candidate that gave the score
    opens: bool = True
    whole_turn: bool = False
    until: datetime | None = None
    neighbours: set[tuple[str, int]] = field(default_factory=set)
    shown: str | None = None
    weighed: bool = False  # whether ``shown`` was decided (lines are cut when first looked at)


class Questions(Generic[T]):
    """A ``Pricing`` run by its caller's loop: iterating yields each memory text it asks
    about, ``answer`` sends back that memory's tokens, and ``result`` is what it returned::

        questions = Questions(pricing)
        for text in questions:
            questions.answer(count(text))
        return questions.result
    """

    def __init__(self, pricing: Pricing[T]) -> None:
        self._pricing = pricing
        self._tokens: int | None = None
        self._result: list[T] = []  # empty until the pricing returned

    def __iter__(self) -> Iterator[str]:
        try:
            text = next(self._pricing)
            while True:
                yield text
                if self._tokens is None:
                    raise RuntimeError(f"the tokens of {text[:60]!r} were asked for, not answered")
                tokens, self._tokens = self._tokens, None
                text = self._pricing.send(tokens)
        except StopIteration as done:
            self._result.append(done.value)

    def answer(self, tokens: int) -> None:
        """The tokens of the memory text last asked about."""
        self._tokens = tokens

    @property
    def result(self) -> T:
        """What the pricing returned, once every question is answered."""
        if not self._result:
            raise RuntimeError("the pricing has questions not yet answered")
        return self._result[0]


def priced(pricing: Pricing[T], count: Callable[[str], int]) -> T:
    """Run ``pricing`` to its result, answering each memory text it yields with ``count``."""
    questions = Questions(pricing)
    for text in questions:
        questions.answer(count(text))
    return questions.result


def walk(
    order: list[Line],
    *,
    k: int,
    max_tokens: int | None,
    fill: bool = False,
    cut: Callable[[Line], str | None] | None = None,
) -> Pricing[list[list[Line]]]:
    """Take lines best first into excerpts until ``k`` excerpts or the budget (see module);
    the tokens of each memory weighed are asked for (``Pricing``).

    A line that may not open a memory waits: it is taken as soon as a line next to it is.
    With ``fill``, a line that does not fit the budget is passed over, not the end: the
    later lines that still fit are taken (the budget is spent, not left at the first long
    line). ``cut`` gives what the prompt shows of a line (``Line.shown``), asked only of the
    lines the walk looks at.

    Returns:
        The excerpts' lines, in the order the excerpts were opened.
    """
    state = _Walk(order, k=k, max_tokens=max_tokens, fill=fill, cut=cut)
    waiting: list[Line] = []
    for line in order:
        taken = yield from state.offer(line)
        if taken is None:
            break
        if not taken:
            if not line.opens:
                waiting.append(line)
            continue
        while waiting:  # a line taken may let waiting ones join it, and those others
            joined: list[tuple[Line, bool | None]] = []
            for w in list(waiting):
                if state.touches(w):
                    joined.append((w, (yield from state.offer(w))))
            if any(result is None for _, result in joined):
                return state.excerpts()
            if not joined:
                break
            offered = {w.key for w, _ in joined}
            waiting = [w for w in waiting if w.key not in offered]
    return state.excerpts()


class _Walk:
    """The excerpts being built, line by line (``_walk``)."""

    def __init__(
        self,
        order: list[Line],
        *,
        k: int,
        max_tokens: int | None,
        fill: bool = False,
        cut: Callable[[Line], str | None] | None = None,
    ) -> None:
        self.k, self.max_tokens, self.fill = k, max_tokens, fill
        self.cut = cut
        self.groups: list[list[Line]] = []  # each excerpt's lines; emptied when merged
        self.tokens: list[int] = []
        self.group_of: dict[tuple[str, int], int] = {}
        self.known = {line.key: line for line in order}
        self.sent_words: set[str] = set()
        self.covered: set[int] = set()
        self.words_shown: dict[tuple[str, int], str] = {}  # each line's words once it is weighed

    def touching(self, line: Line) -> list[int]:
        """The excerpts next to ``line`` (through lines left out as repeats)."""
        reached = _reach(line, self.known, self.sent_words, self.words)
        return sorted({self.group_of[key] for key in reached if key in self.group_of})

    def touches(self, line: Line) -> bool:
        """Whether ``line`` is next to an excerpt taken."""
        return bool(self.touching(line))

    def offer(self, line: Line) -> Pricing[bool | None]:
        """Take ``line`` if it may be: ``True`` taken, ``False`` left out, ``None`` the end
        (it would open memory ``k + 1`` or not fit the budget); the excerpt it would make is
        priced (``Pricing``)."""
        words = self.words(line)
        touching = self.touching(line)
        if line.turn and words in self.sent_words:
            # Never twice in one prompt; the passages either side of it are still one.
            if len(touching) > 1:
                merged = [member for g in touching for member in self.groups[g]]
                self._join(touching, merged, (yield render(merged)))
            return False
        if line.whole_turn and set(line.message_ids) <= self.covered:
            return False  # a turn card that could not be split, whose lines are all sent
        if not touching and not line.opens:
            return False  # a bare question or boilerplate is context, never a memory alone
        if not touching and sum(1 for g in self.groups if g) == self.k:
            return None
        merged = [member for g in touching for member in self.groups[g]] + [line]
        cost = yield render(merged)
        others = sum(self.tokens) - sum(self.tokens[g] for g in touching)
        if self.max_tokens is not None and others + cost > self.max_tokens:
            return False if self.fill else None
        if not touching:
            touching = [len(self.groups)]
            self.groups.append([])
            self.tokens.append(0)
        self._join(touching, merged, cost)
        self.sent_words.add(words)
        self.covered.update(line.message_ids)
        return True

    def words(self, line: Line) -> str:
        """``shown_words`` of a line, cut first if it was not yet (then fixed: remembered)."""
        words = self.words_shown.get(line.key)
        if words is None:
            if self.cut is not None and line.turn and not line.weighed:
                line.shown, line.weighed = self.cut(line), True
            words = self.words_shown[line.key] = shown_words(line)
        return words

    def _join(self, touching: list[int], merged: list[Line], cost: int) -> None:
        """Make the excerpts ``touching`` one (the first of them), holding ``merged``."""
        target = touching[0]
        for g in touching[1:]:
            self.groups[g], self.tokens[g] = [], 0
        self.groups[target], self.tokens[target] = merged, cost
        for member in merged:
            self.group_of[member.key] = target

    def excerpts(self) -> list[list[Line]]:
        """The excerpts taken (their lines), in the order they were opened."""
        return [group for group in self.groups if group]


def _reach(
    line: Line,
    known: dict[tuple[str, int], Line],
    sent_words: set[str],
    words: Callable[[Line], str],
) -> set[tuple[str, int]]:
    """The lines next to ``line``, looking through lines that repeat words sent already:
    they are left out, yet the lines either side of them are one passage."""
    reached, frontier = set(line.neighbours), list(line.neighbours)
    while frontier:
        neighbour = known.get(frontier.pop())
        if neighbour is not None and neighbour.turn and words(neighbour) in sent_words:
            for key in neighbour.neighbours - reached - {line.key}:
                reached.add(key)
                frontier.append(key)
    return reached


def render(lines: Sequence[Line]) -> str:
    """An excerpt's text: its lines in conversation order, the first one's day first, and
    before it the end of the validity of a stale line among them (``[until 4 April 2025]``)."""
    ordered = sorted(lines, key=lambda line: line.key)
    body = "\n".join(line.text if line.shown is None else line.shown for line in ordered)
    day = next((line.day for line in ordered if line.day), None)
    text = f"{day} {body}" if day else body
    stale = [line.until for line in ordered if line.turn and line.until is not None]
    until = min(stale, default=None)  # a whole card shows its own validity in its text
    return f"[until {day_text(until)}] {text}" if until is not None else text


def shown_words(line: Line) -> str:
    """A line as the prompt shows it, compared for repeats (``words_of``): two lines cut to
    the same words are one line to the reader."""
    return words_of(line.text if line.shown is None else line.shown)


def words_of(text: str) -> str:
    """A line as compared for repeats: what was said, whoever said it, spacing and case aside."""
    said = text.split(": ", 1)[-1]
    return " ".join(said.split()).casefold()
