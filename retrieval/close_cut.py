"""Lines cut close: the recipe rules for lists and for the lines after the best few.

What ``retrieval.excerpts`` asks a recipe for before its walk, beside the default cut
(``retrieval.excerpt_text.cut_line``: a line's matching sentences and two either side):

- **A question asking for several things** ("What books has Melanie read?",
  ``retrieval.question_shape``) finds its answer a line here and a line there: from the
  recipe's ``several_close_cut_from``-th line on, each line is cut to its matching sentences
  alone (``question_config``).
- **The lines after the best few** (``close_cut_from``) are cut to their matching sentences
  and the ``close_sentences_after`` after each, a line matching none to its first sentence
  (``line_cutter``): the best lines carry the answer with the words around it, the later ones
  cite more of the conversation.
- **The speakers' names** are not words a line is scored or cut for unless the recipe's
  ``names_cover`` (``covered_terms``).

The default recipe uses none of them; ``CUT_FAR_LINES`` all three, ``LISTS_CUT_CLOSE`` the
first and the last (``retrieval.recipe``).
"""

from collections.abc import Callable, Iterable, Sequence

from retrieval.excerpt_text import cut_line, line_terms
from retrieval.excerpt_walk import Line
from retrieval.question_shape import asks_for_several
from retrieval.recipe import SearchConfig

__all__ = ["covered_terms", "line_cutter", "question_config"]


def question_config(config: SearchConfig, question: str) -> SearchConfig:
    """The recipe for ``question``: one asking for several things has its lines cut from the
    recipe's ``several_close_cut_from`` on, each to its matching sentences alone."""
    if config.several_close_cut_from is not None and asks_for_several(question):
        several = {"close_cut_from": config.several_close_cut_from, "close_sentences_after": 0}
        return config.model_copy(update=several)
    return config


def line_cutter(
    order: Sequence[Line], covered: set[str], config: SearchConfig
) -> Callable[[Line], str | None]:
    """What the prompt shows of a line (``order``: the lines best first): cut as the recipe
    says, and from the recipe's ``close_cut_from``-th best line on, to its matching sentences
    and the ``close_sentences_after`` after each (a line matching none to its first
    sentence)."""
    start = config.close_cut_from
    if start is None:
        return lambda line: cut_line(line.text, covered, config)
    close = config.model_copy(
        update={
            "sentences_before": 0,
            "sentences_after": config.close_sentences_after,
            "context_sentences": 1,
        }
    )
    position = {line.key: index for index, line in enumerate(order)}
    return lambda line: cut_line(
        line.text, covered, close if position[line.key] >= start else config
    )


def covered_terms(wanted: set[str], lines: Iterable[Line], config: SearchConfig) -> set[str]:
    """The query's terms a line's coverage counts and its cut keeps sentences for: all of
    them if the recipe's ``names_cover``, else less the names of the speakers of ``lines``
    (``Melanie: ...``), or all of them when nothing else is left. Every line of a two-person
    conversation holds one of the names, as its speaker or as whom it addresses ("Yeah,
    John!"), so a name matched tells nothing about the line (the speaker weight,
    ``line_speaker``, reads it instead)."""
    if config.names_cover:
        return wanted
    names: set[str] = set()
    for line in lines:
        speaker, colon, _ = line.text.partition(": ")
        if line.turn and colon:
            names.update(line_terms(speaker, config))
    return (wanted - names) or wanted
