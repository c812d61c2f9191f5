"""``compose_excerpts``: the gate, line-by-line merging, repeats left out, ``k`` and the budget.

Pure: cards are built by hand (as the store returns them) and tokens counted as words.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

import retrieval.excerpt_text as excerpt_text
import retrieval.excerpt_walk as excerpt_walk
import retrieval.excerpts as excerpts
from retrieval import (
    CUT_FAR_LINES,
    DEFAULT_SEARCH,
    LISTS_CUT_CLOSE,
    RECIPES,
    ScoredCard,
    SearchConfig,
    Utterance,
    analyze,
    compose_excerpts,
    turn_card_text,
)
from retrieval.excerpt_walk import Line
from storage import Card

SAID = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
GATED = DEFAULT_SEARCH.model_copy(update={"min_similarity": 0.3})


def words(text: str) -> int:
    return len(text.split())


def turn_card(card_id: int, lines: Sequence[tuple[int, str]]) -> Card:
    """A turn card over ``(message id, "Speaker: text")`` lines, as archiving writes it."""
    utterances = [
        Utterance(speaker=line.split(": ")[0], text=line.split(": ", 1)[1]) for _, line in lines
    ]
    return Card(
        id=card_id,
        user_id="u",
        type="turn",
        text=turn_card_text(utterances, day=SAID.date()),
        topic=None,
        tags=["user"],
        session_id="s",
        source_message_ids=[message_id for message_id, _ in lines],
        source_client_ids=[],
        observed_at=SAID,
        occurred_at=None,
        valid_from=SAID,
        valid_to=None,
        superseded_by=None,
        pinned=False,
        created_at=SAID,
    )


def fact(card_id: int, text: str, sources: Sequence[int] = ()) -> Card:
    card = turn_card(card_id, [(1, "User: x")])
    return card.model_copy(
        update={"type": "fact", "text": text, "source_message_ids": list(sources)}
    )


def hit(card: Card, similarity: float = 0.5, score: float = 0.5) -> ScoredCard:
    return ScoredCard(card=card, score=score, similarity=similarity, keyword_score=1.0)


CONVERSATION = [
    (11, "User: We adopted a puppy named Biscuit yesterday."),
    (12, "Assistant: Congratulations, what breed is Biscuit?"),
    (13, "User: A golden retriever, he loves the beach."),
    (14, "Assistant: Golden retrievers love water."),
    (15, "User: I also started the violin."),
]


def window(center: int) -> Card:
    """The turn card of message ``11 + center``: it and one neighbour each side."""
    lines = CONVERSATION[max(0, center - 1) : center + 2]
    return turn_card(100 + center, lines)


def compose(hits: Sequence[ScoredCard], query: str, **options: object) -> list[str]:
    settings: dict[str, object] = {"k": 4, "max_tokens": None, "count": words}
    settings.update(options)
    config = settings.pop("config", GATED)
    excerpts = compose_excerpts(hits, analyze(query), config, **settings)  # type: ignore[arg-type]
    return [excerpt.text for excerpt in excerpts]


def test_overlapping_turn_cards_become_one_memory_with_each_line_once() -> None:
    texts = compose([hit(window(1)), hit(window(2)), hit(window(0))], "Biscuit puppy breed")
    assert texts == [
        "[8 May 2023] User: We adopted a puppy named Biscuit yesterday.\n"
        "Assistant: Congratulations, what breed is Biscuit?\n"
        "User: A golden retriever, he loves the beach.\n"
        "Assistant: Golden retrievers love water."
    ]


def test_lines_of_cards_that_do_not_touch_are_separate_memories_best_first() -> None:
    far = turn_card(300, [(40, "User: My sister lives in Lisbon."), (41, "Assistant: Nice.")])
    texts = compose([hit(far), hit(window(0))], "Where does my sister live? Lisbon")
    assert texts[0].startswith("[8 May 2023] User: My sister lives in Lisbon.")
    assert texts[1].startswith("[8 May 2023] User: We adopted a puppy")


def test_below_the_gate_nothing_is_sent_unless_the_card_holds_the_query_words() -> None:
    weak = [hit(window(1), similarity=0.1), hit(window(4), similarity=0.29)]
    assert compose(weak, "What is the capital of Peru?") == []
    # Half of the query's words ("violin", "start") open the gate whatever the cosine.
    assert compose(weak, "When did I start the violin?") != []
    # No gate for an embedder nobody measured.
    assert compose(weak, "What is the capital of Peru?", config=DEFAULT_SEARCH) != []
    # A user's own threshold replaces the recipe's.
    assert compose(weak, "capital of Peru?", min_similarity=0.05) != []


def test_a_line_said_word_for_word_already_is_left_out_yet_joins_its_neighbours() -> None:
    first = turn_card(1, [(1, "User: I'm vegetarian."), (2, "Assistant: Got it, noted.")])
    second = turn_card(
        2,
        [
            (20, "User: Got a new phone, a Pixel 8."),
            (21, "Assistant: Got it, noted."),
            (22, "User: And I'm vegan now."),
        ],
    )
    texts = compose([hit(first), hit(second)], "vegetarian vegan diet")
    lines = [line for text in texts for line in text.split("\n")]
    assert sum("Got it, noted." in line for line in lines) == 1
    # Line 22 still joins line 20 through the repeat left out between them: one memory.
    assert any("Pixel 8." in text and "vegan now" in text for text in texts)
    assert len(texts) == 2


def test_the_walk_stops_at_k_memories_and_at_the_budget() -> None:
    cards = [
        turn_card(i, [(10 * i, f"User: puppy fact number {i} here."), (10 * i + 1, "Bot: ok.")])
        for i in range(1, 6)
    ]
    hits = [hit(card) for card in cards]
    assert len(compose(hits, "puppy fact", k=2)) == 2
    budgeted = compose(hits, "puppy fact", k=10, max_tokens=20)
    assert sum(words(text) for text in budgeted) <= 20
    assert budgeted and len(budgeted) < 5
    # A budget smaller than the best line sends nothing rather than a cut line.
    assert compose(hits, "puppy fact", max_tokens=3) == []


def test_a_question_line_ranks_below_a_statement_of_the_same_card() -> None:
    config = GATED.model_copy(update={"excerpt_cards": 1})
    card = turn_card(7, [(1, "User: Do you like the beach?"), (2, "Bot: I love the beach in May.")])
    excerpts = compose_excerpts(
        [hit(card)], analyze("beach"), config, k=1, max_tokens=10, count=words
    )
    assert [e.text for e in excerpts] == ["[8 May 2023] Bot: I love the beach in May."]


def test_a_bare_question_or_boilerplate_never_opens_a_memory_of_its_own() -> None:
    asked = turn_card(1, [(1, "User: Which phone case should I buy?"), (2, "Bot: Happy to help.")])
    told = turn_card(2, [(5, "User: My phone is a Pixel 8."), (6, "Bot: Happy to help.")])
    texts = compose([hit(asked), hit(told)], "Which phone case?")
    assert texts == ["[8 May 2023] User: My phone is a Pixel 8.\nBot: Happy to help."]
    # A question after something said is a statement too.
    mixed = turn_card(3, [(9, "User: I bought a phone case. Was it a good idea?")])
    assert compose([hit(mixed)], "phone case") != []


def test_other_cards_are_one_line_with_their_day_and_a_reason() -> None:
    card = fact(5, "The user is allergic to peanuts.", sources=[13])
    [excerpt] = compose_excerpts(
        [hit(card, similarity=0.62)], analyze("allergy peanuts"), GATED, k=4, max_tokens=None,
        count=words,
    )  # fmt: skip
    assert excerpt.text == "[8 May 2023] The user is allergic to peanuts."
    assert excerpt.message_ids == (13,)
    assert excerpt.reason() == "rank 1: cosine 0.62 >= 0.30, 50% of the query's words"


def test_a_turn_card_that_cannot_be_split_is_sent_whole_once() -> None:
    legacy = turn_card(9, [(1, "User: a"), (2, "Bot: b")]).model_copy(
        update={"text": "[8 May 2023] User: line one\nline two\nBot: b"}
    )
    texts = compose([hit(legacy), hit(legacy.model_copy(update={"id": 10}))], "line")
    assert texts == ["[8 May 2023] User: line one\nline two\nBot: b"]


@pytest.mark.parametrize("k", [0, -1])
def test_no_memory_is_asked_for(k: int) -> None:
    assert compose([hit(window(1))], "puppy", k=k) == []


def test_the_recipe_is_frozen_and_named() -> None:
    assert isinstance(DEFAULT_SEARCH, SearchConfig)
    assert {DEFAULT_SEARCH.name, CUT_FAR_LINES.name, LISTS_CUT_CLOSE.name} <= set(RECIPES)
    assert "conv-26" in DEFAULT_SEARCH.tuned_on
    with pytest.raises(ValueError):
        DEFAULT_SEARCH.model_copy(update={}).__setattr__("rrf_k", 5)


ENDED = datetime(2025, 4, 4, 9, tzinfo=UTC)


def test_a_stale_excerpt_is_marked_and_sent_after_every_current_memory() -> None:
    lyon = turn_card(1, [(1, "User: I live in Lyon, city of lights.")]).model_copy(
        update={"valid_to": ENDED}
    )
    berlin = turn_card(2, [(5, "User: I moved to Berlin.")])
    old_fact = fact(3, "User lives in Lyon", sources=[1]).model_copy(update={"valid_to": ENDED})
    # Ranked first by search, the stale excerpt still goes after the current one.
    texts = compose([hit(lyon), hit(old_fact), hit(berlin)], "Lyon lives Berlin city")
    assert texts == [
        "[8 May 2023] User: I moved to Berlin.",
        "[until 4 April 2025] [8 May 2023] User: I live in Lyon, city of lights.",
        "[8 May 2023, until 4 April 2025] User lives in Lyon",
    ]
    # A question about the past asks for what held before: in its rank.
    past = compose([hit(lyon), hit(berlin)], "Lyon lives Berlin city", stale_last=False)
    assert past[0].startswith("[until 4 April 2025] ")


def test_newest_first_orders_the_memories_taken_not_which_are_taken() -> None:
    def said(card_id: int, line: str, days: int) -> ScoredCard:
        card = turn_card(card_id, [(card_id, line)])
        return hit(card.model_copy(update={"observed_at": ENDED + timedelta(days=days)}))

    piano = said(1, "User: I'm learning the piano.", 0)
    cello = said(2, "User: I switched to the cello.", 30)
    ukulele = said(3, "User: My friend learns the ukulele.", 10)
    named = hit(fact(4, "User plays in a band", sources=[4]))
    stale = hit(fact(5, "User learns the harp", sources=[5]).model_copy(update={"valid_to": ENDED}))
    hits = [piano, named, stale, ukulele, cello]
    question = "learning piano cello ukulele band harp"

    by_score = compose(hits, question, k=5, first={4})
    newest = compose(hits, question, k=5, first={4}, newest_first=True)

    assert sorted(newest) == sorted(by_score)
    assert [text.split("] ")[-1] for text in newest] == [
        "User plays in a band",  # what the question names stays first
        "User: I switched to the cello.",
        "User: My friend learns the ukulele.",
        "User: I'm learning the piano.",
        "User learns the harp",  # and what no longer holds last
    ]
    assert by_score.index(next(t for t in by_score if "piano" in t)) < by_score.index(
        next(t for t in by_score if "cello" in t)
    )


def test_a_vouched_card_passes_the_gate_and_says_why() -> None:
    current = fact(7, "User lives in Berlin", sources=[5])
    [excerpt] = compose_excerpts(
        [hit(current, similarity=0.05)], analyze("home town?"), GATED, k=4, max_tokens=None,
        count=words, vouched={7: "the current value of a fact an older memory holds"},
    )  # fmt: skip
    assert excerpt.text.endswith("User lives in Berlin")
    assert "current value" in excerpt.reason()
    assert compose([hit(current, similarity=0.05)], "home town?") == []


def test_a_cjk_query_has_no_gate() -> None:
    card = turn_card(8, [(1, "User: 我家在天津。")])
    assert compose([hit(card, similarity=0.0)], "我现在家在哪里") != []
    assert compose([hit(card, similarity=0.0)], "where is my home now?") == []


#: The recipe's lines cut to what matches (its default), and the same recipe sending whole lines.
# The cut to the matching sentences alone (recipe cut-lines-2026-12), whose mechanics these
# tests show; the default keeps the sentences around them too.
TRIMMED = GATED.model_copy(
    update={"trim_lines": True, "context_sentences": 1, "sentences_before": 0, "sentences_after": 0}
)
WHOLE = GATED.model_copy(update={"trim_lines": False})


def test_a_line_is_cut_to_its_sentences_that_hold_the_query_words() -> None:
    card = turn_card(
        1,
        [
            (
                1,
                "User: Hi there! Long week. We adopted a puppy named Biscuit. Anyway, how are you?",
            ),
            (2, "Bot: Lovely to hear. What a week. Tell me more."),
        ],
    )
    [text] = compose([hit(card)], "puppy Biscuit", config=TRIMMED)
    # The matching sentence of the best line; its reply cut to its first sentence.
    assert (
        text == "[8 May 2023] User: … We adopted a puppy named Biscuit. …\nBot: Lovely to hear. …"
    )
    [whole] = compose([hit(card)], "puppy Biscuit", config=WHOLE)
    assert words(text) < words(whole)
    # Every line is still its source: the memory cites the same messages.
    [excerpt] = compose_excerpts(
        [hit(card)], analyze("puppy Biscuit"), TRIMMED, k=4, max_tokens=None, count=words
    )
    assert excerpt.message_ids == (1, 2)


def test_cut_lines_let_more_evidence_fit_the_same_budget() -> None:
    filler = " Nothing else to say about it really." * 4
    cards = [
        turn_card(i, [(10 * i, f"User: The puppy learned trick number {i}.{filler}")])
        for i in range(1, 5)
    ]
    hits = [hit(card) for card in cards]
    whole = compose(hits, "puppy trick", k=10, max_tokens=60, config=WHOLE)
    cut = compose(hits, "puppy trick", k=10, max_tokens=60, config=TRIMMED)
    assert sum(words(text) for text in cut) <= 60
    assert len(cut) == 4 > len(whole)


def test_two_lines_cut_to_the_same_words_are_sent_once() -> None:
    first = turn_card(1, [(1, "User: I like green tea."), (2, "Bot: Noted. Have a nice day.")])
    second = turn_card(2, [(5, "User: Mostly tea, really."), (6, "Bot: Noted. See you soon.")])
    texts = compose([hit(first), hit(second)], "tea", config=TRIMMED)
    lines = [line for text in texts for line in text.split("\n")]
    assert sum(line.endswith("Bot: Noted. …") for line in lines) == 1
    assert any("green tea" in text for text in texts) and any("Mostly tea" in t for t in texts)


def test_the_budget_is_spent_past_a_line_that_does_not_fit() -> None:
    long = turn_card(1, [(1, "User: puppy " + "words " * 30)])
    short = turn_card(2, [(5, "User: the puppy is called Biscuit.")])
    hits = [hit(long), hit(short)]
    ended = GATED.model_copy(update={"fill_budget": False})
    assert compose(hits, "puppy", max_tokens=20, config=ended) == []  # ends at the long line
    assert compose(hits, "puppy", max_tokens=20) == [
        "[8 May 2023] User: the puppy is called Biscuit."
    ]


def test_a_line_said_by_the_person_the_query_names_comes_before_one_said_to_them() -> None:
    card = turn_card(
        1,
        [
            (1, "Caroline: Melanie, you should try pottery."),
            (2, "Caroline: Anyway, how was the weekend?"),
            (3, "Melanie: I started pottery classes."),
        ],
    )
    config = TRIMMED.model_copy(update={"line_speaker": 0.5})
    assert compose([hit(card)], "What does Melanie do? pottery", k=1, config=config) == [
        "[8 May 2023] Melanie: I started pottery classes."
    ]
    unnamed = config.model_copy(update={"line_speaker": 0.0})
    assert compose([hit(card)], "What does Melanie do? pottery", k=1, config=unnamed) == [
        "[8 May 2023] Caroline: Melanie, you should try pottery."
    ]


def test_by_default_a_cut_line_keeps_the_sentences_near_the_match_and_others_stay_whole() -> None:
    # The answer ("love, faith and strength") is two sentences after the one naming the topic,
    # and the reply names nothing the query asks for: cut to the matching sentence and the
    # reply to its first, the memory would cite both messages yet no longer say the answer.
    card = turn_card(
        1,
        [
            (
                1,
                "Caroline: Thanks, Melanie! This necklace is special to me. My grandma gave it "
                "to me. It stands for love, faith and strength. Anyway. How are the kids?",
            ),
            (2, "Melanie: Wow. That is lovely. My kids say hi."),
        ],
    )
    query = "What does Caroline's necklace symbolize?"
    assert compose([hit(card)], query) == [
        "[8 May 2023] Caroline: Thanks, Melanie! This necklace is special to me. My grandma "
        "gave it to me. It stands for love, faith and strength. …\n"
        "Melanie: Wow. That is lovely. My kids say hi."
    ]
    assert compose([hit(card)], query, config=TRIMMED) == [
        "[8 May 2023] Caroline: … This necklace is special to me. …\nMelanie: Wow. …"
    ]


def test_the_speakers_names_are_not_words_a_line_covers() -> None:
    # Every line of a two-person conversation holds a name, as its speaker or as whom it
    # addresses: "Sure thing, Maria." matched the question's names and nothing it asked.
    addressed = turn_card(1, [(1, "John: Sure thing, Maria.")])
    answer = turn_card(2, [(5, "Maria: I took a trip to Spain.")])
    hits = [hit(addressed), hit(answer)]
    query = "What has John told Maria about Spain?"
    unnamed = GATED.model_copy(update={"names_cover": False})
    assert compose(hits, query, k=1, config=unnamed) == [
        "[8 May 2023] Maria: I took a trip to Spain."
    ]
    assert compose(hits, query, k=1) == ["[8 May 2023] John: Sure thing, Maria."]


FAR = "It was great. Nothing else happened."


def test_lines_after_the_best_few_are_cut_close() -> None:
    cards = [
        turn_card(i, [(10 * i, f"User: I read the book number {i}. {FAR}")]) for i in range(1, 4)
    ]
    config = GATED.model_copy(update={"close_cut_from": 1})
    texts = compose([hit(card) for card in cards], "book", k=10, config=config)
    # The best line keeps two sentences after its match; the later ones the one after.
    assert texts[0] == f"[8 May 2023] User: I read the book number 1. {FAR}"
    assert texts[1:] == [
        f"[8 May 2023] User: I read the book number {i}. It was great. …" for i in (2, 3)
    ]
    near = config.model_copy(update={"close_cut_from": None})
    assert all(FAR in text for text in compose([hit(c) for c in cards], "book", config=near))


def test_a_question_asking_for_several_things_has_every_line_cut_close() -> None:
    cards = [
        turn_card(i, [(10 * i, f"User: I read the book number {i}. {FAR}")]) for i in range(1, 3)
    ]
    config = CUT_FAR_LINES.model_copy(update={"min_similarity": 0.3})
    question = "What books has she read?"
    several = compose([hit(c) for c in cards], "book", config=config, question=question)
    assert several == [f"[8 May 2023] User: I read the book number {i}. …" for i in (1, 2)]
    one = compose([hit(c) for c in cards], "book", config=config, question="What book is it?")
    assert all(FAR in text for text in one)


def test_lists_cut_close_cuts_a_list_questions_lines_alone() -> None:
    cards = [
        turn_card(i, [(10 * i, f"User: I read the book number {i}. {FAR}")]) for i in range(1, 12)
    ]
    config = LISTS_CUT_CLOSE.model_copy(update={"min_similarity": 0.3})
    hits = [hit(c) for c in cards]
    several = compose(hits, "book", k=20, config=config, question="What books has she read?")
    assert several[0] == "[8 May 2023] User: I read the book number 1. …"
    assert all(text.endswith("…") for text in several)
    # Any other question: every line as the default cuts it, far ones too (not from line 8).
    one = compose(hits, "book", k=20, config=config, question="What book is it?")
    assert len(one) > 8 and all(FAR in text for text in one)


def test_a_line_of_overlapping_cards_is_looked_at_once_and_its_words_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    looked: list[str] = []
    compared: list[str] = []

    def bare_question(text: str) -> bool:
        looked.append(text)
        return excerpt_text.bare_question(text)

    def shown_words(line: Line) -> str:
        compared.append(line.text)
        return excerpt_walk.words_of(line.text if line.shown is None else line.shown)

    monkeypatch.setattr(excerpts, "bare_question", bare_question)
    monkeypatch.setattr(excerpt_walk, "shown_words", shown_words)
    texts = compose([hit(window(1)), hit(window(2)), hit(window(0))], "Biscuit puppy breed")
    assert len(texts) == 1
    # Three cards hold four lines eight times: each line is weighed once and compared once.
    lines = sorted(line for _, line in CONVERSATION[:4])
    assert sorted(looked) == lines
    assert sorted(compared) == lines


def test_remembered_line_terms_add_nothing_the_garbage_collector_walks() -> None:
    # A full collection walks every tracked object; recall's cache of line terms stays full.
    texts = [f"Anna: deploy {n} of checkout changed the retry policy in Lyon." for n in range(500)]
    gc.collect()
    tracked = len(gc.get_objects())
    remembered = [excerpt_text.line_terms(text, GATED) for text in texts]
    gc.collect()
    assert not any(gc.is_tracked(terms) for terms in remembered)
    assert len(gc.get_objects()) - tracked < 50  # nor do the cache's keys
    assert remembered[0] == tuple(dict.fromkeys(analyze(texts[0], GATED.stop_words)))
    assert excerpt_text.line_terms(texts[0], GATED) is remembered[0]
