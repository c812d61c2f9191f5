"""``stratamem eval locomo``: the scoring on hand-made data, then the command end to end."""

from __future__ import annotations

import functools
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import memory.cli.eval as eval_cli
from memory import Memory, Settings
from memory.cli import main
from memory.context.tokens import TiktokenCounter
from memory.eval.locomo import (
    Conversation,
    LocomoFormatError,
    Question,
    QuestionScore,
    Recalled,
    Session,
    Turn,
    conversation_tokens,
    evidence_recall,
    load_locomo,
    parse_conversation,
    parse_evidence,
    parse_session_time,
    reciprocal_rank,
    score_question,
    summarize,
)
from memory.eval.offline import offline_memory
from memory.longterm.recalled_memories import memory_tokens
from retrieval import (
    DEFAULT_SEARCH,
    LISTS_CUT_CLOSE,
    MINILM_NAME,
    HashingEmbedder,
    SearchConfig,
    search_config_for,
)
from storage import CardFilter, Database


def words(text: str) -> int:
    """A stand-in token counter: one token per word."""
    return len(text.split())


CARDS = [
    Recalled("[8 May 2023] A: one\nB: two", ("D1:1", "D1:2")),
    Recalled("[8 May 2023] B: two\nA: three", ("D1:2", "D1:3")),
    Recalled("[9 May 2023] A: four", ("D2:1",)),
]


# --- scoring, no database -------------------------------------------------------------------


def test_evidence_recall_is_the_share_of_evidence_among_the_sources() -> None:
    assert evidence_recall(["D1:1"], CARDS) == 1.0
    assert evidence_recall(["D1:3", "D2:1", "D3:1", "D3:2"], CARDS) == 0.5
    assert evidence_recall(["D9:9"], CARDS) == 0.0
    assert evidence_recall(["D1:1"], []) == 0.0


def test_reciprocal_rank_is_one_over_the_first_card_holding_evidence() -> None:
    assert reciprocal_rank(["D1:1"], CARDS) == 1.0
    assert reciprocal_rank(["D1:3"], CARDS) == 0.5
    assert reciprocal_rank(["D2:1", "D9:9"], CARDS) == pytest.approx(1 / 3)
    assert reciprocal_rank(["D9:9"], CARDS) == 0.0


def test_evidence_ids_are_split_validated_and_deduplicated() -> None:
    known = {"D1:1", "D1:2", "D8:6", "D9:17"}
    assert parse_evidence(["D1:1", "D8:6; D9:17", "D1:1"], known) == (
        ("D1:1", "D8:6", "D9:17"),
        0,
        0,
    )
    assert parse_evidence(["D1", "session 3", "D7:1", "D1:2"], known) == (("D1:2",), 3, 1)
    assert parse_evidence([], known) == ((), 0, 0)


def test_session_times_are_parsed_or_none() -> None:
    assert parse_session_time("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert parse_session_time("8 May 2023") == datetime(2023, 5, 8, tzinfo=UTC)
    assert parse_session_time("") is None
    assert parse_session_time("sometime") is None


def test_conversation_tokens_count_each_date_once_and_every_line() -> None:
    conversation = Conversation(
        "s",
        (
            Session(1, datetime(2023, 5, 8, tzinfo=UTC), (Turn("D1:1", "A", "hi there"),)),
            Session(2, None, (Turn("D2:1", "B", "look", caption="a dog"),)),
        ),
        (),
    )
    # "8 May 2023" (3) + "A: hi there" (3) + "B: look [shares an image: a dog]" (7)
    assert conversation_tokens(conversation, words) == 13


def test_score_question_combines_recall_rank_and_token_share() -> None:
    question = Question("q", 4, ("D1:3", "D2:1"))
    score = score_question(question, CARDS[1:], full_tokens=40, count=words)
    # 7 + 5 words of the two cards' texts over 40
    assert score == QuestionScore(category=4, recall=1.0, reciprocal_rank=1.0, token_share=0.3)


def test_summarize_averages_per_category_in_order_then_overall() -> None:
    scores = [
        QuestionScore(4, 1.0, 1.0, 0.1),
        QuestionScore(1, 0.5, 0.5, 0.2),
        QuestionScore(4, 0.0, 0.0, 0.3),
        QuestionScore(7, 1.0, 1.0, 0.0),
    ]
    rows = summarize(scores)
    assert [r.name for r in rows] == ["multi-hop", "single-hop", "category 7", "overall"]
    single = rows[1]
    assert (single.questions, single.recall, single.mrr) == (2, 0.5, 0.5)
    assert single.token_share == pytest.approx(0.2)
    overall = rows[-1]
    assert (overall.questions, overall.recall, overall.mrr) == (4, 0.625, 0.625)
    assert overall.token_share == pytest.approx(0.15)
    assert summarize([])[-1].questions == 0


def test_questions_without_valid_evidence_are_counted_not_scored() -> None:
    conversation = parse_conversation(locomo_sample("c1"))
    assert [q.category for q in conversation.questions] == [4, 2, 1, 3]
    assert conversation.questions[2].evidence == ("D1:4",)
    assert conversation.questions[3].evidence == ("D2:3", "D2:4")
    assert (conversation.malformed, conversation.missing) == (1, 1)
    assert conversation.sessions[1].time == datetime(2023, 6, 20, 10, 0, tzinfo=UTC)


def test_a_session_is_recorded_with_ids_times_speakers_and_captions() -> None:
    session = parse_conversation(locomo_sample("c1")).sessions[0]
    session = Session(
        session.number,
        session.time,
        (*session.turns[:3], Turn("D1:4", "Bob", "Look!", caption="a violin")),
    )
    messages = eval_cli.session_messages(session, user_speaker="Alice")
    assert [(m["role"], m["name"], m["id"]) for m in messages] == [
        ("user", "Alice", "D1:1"),
        ("assistant", "Bob", "D1:2"),
        ("user", "Alice", "D1:3"),
        ("assistant", "Bob", "D1:4"),
    ]
    assert messages[3]["content"] == "Look! [shares an image: a violin]"
    assert {m["timestamp"] for m in messages} == {datetime(2023, 5, 8, 13, 56, tzinfo=UTC)}
    untimed = Session(9, None, session.turns[:1])
    assert "timestamp" not in eval_cli.session_messages(untimed, user_speaker="Alice")[0]


def test_turn_cards_through_the_public_api_hold_each_turn_with_its_neighbours(
    database: Database,
) -> None:
    conversation = parse_conversation(locomo_sample(f"c-{uuid.uuid4()}"))
    settings = Settings(summary={"mode": "background", "debounce_seconds": 0})
    memory = Memory(database, settings, embedder=HashingEmbedder(name=MINILM_NAME))
    recaller = Memory(
        database,
        Settings(cards={"k": 50, "max_tokens": 40}),
        embedder=HashingEmbedder(name=MINILM_NAME),
    )
    backend = eval_cli.MemoryBackend(memory, {40: recaller})
    backend.ingest(conversation)

    store = memory._parts.longterm.store  # type: ignore[union-attr]
    user_id = eval_cli.user_id_of(conversation)
    turns = store.list_cards(user_id, CardFilter(types=("turn",), session_id="session_1"))
    assert sorted(card.source_client_ids for card in turns) == [
        ["D1:1", "D1:2"],
        ["D1:1", "D1:2", "D1:3"],
        ["D1:2", "D1:3", "D1:4"],
        ["D1:3", "D1:4"],
    ]
    first = next(card for card in turns if card.source_client_ids == ["D1:1", "D1:2"])
    assert first.text.startswith("[8 May 2023] Alice: I adopted a puppy")
    assert first.observed_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    # Alice is the user: her sentences also give extracted cards, named by her dialog ids.
    extracted = [c for c in store.list_cards(user_id) if c.type != "turn"]
    assert extracted and all(
        set(c.source_client_ids) <= {"D1:1", "D1:3", "D2:1", "D2:3"} for c in extracted
    )
    # The memories of the prompt, as prepare sends them at a budget of 40 tokens: their
    # sources are the dialog ids of the lines they hold, and they fit the budget.
    dialog_ids = backend.dialog_ids(conversation)
    assert sorted(dialog_ids.values())[:2] == ["D1:1", "D1:2"]
    recalled = backend.recall(user_id, "Biscuit puppy", 40, dialog_ids)
    assert recalled and "D1:1" in recalled[0].sources
    assert "Biscuit" in recalled[0].text
    count = functools.partial(memory_tokens, TiktokenCounter())
    assert sum(count(r.text) for r in recalled) <= 40
    cards = backend.search(user_id, "Biscuit puppy", 2)
    assert "D1:1" in cards[0].sources


def test_an_offline_memory_recalls_with_the_recipe_asked_and_the_embedders_gate(
    database: Database, tmp_path: Path
) -> None:
    embedder = HashingEmbedder(name=MINILM_NAME)
    default = offline_memory(database, tmp_path, embedder, k=3)
    listing = offline_memory(database, tmp_path, embedder, recipe=LISTS_CUT_CLOSE, k=3)

    gate = search_config_for(embedder).min_similarity
    assert default._longterm().index.config == search_config_for(embedder)
    config = listing._longterm().index.config
    assert config == LISTS_CUT_CLOSE.model_copy(update={"min_similarity": gate})
    assert (config.names_cover, config.several_close_cut_from) == (False, 0)
    # Offline whatever the environment says: no chat model.
    assert listing.settings.llm_base_url is None and listing.settings.cards.k == 3


@pytest.mark.parametrize("content", ["{not json", '{"qa": []}', '[{"qa": []}]'])
def test_files_that_are_not_locomo_are_a_format_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(LocomoFormatError):
        load_locomo(path)


# --- the command ----------------------------------------------------------------------------


def locomo_sample(sample_id: str) -> dict[str, Any]:
    """A tiny LoCoMo-shaped sample: 2 sessions of 4 turns, 6 questions (4 with evidence)."""
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Alice",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                turn("D1:1", "Alice", "I adopted a puppy named Biscuit yesterday."),
                turn("D1:2", "Bob", "Congratulations, what breed is it?"),
                turn("D1:3", "Alice", "A golden retriever, he loves the beach."),
                turn("D1:4", "Bob", "I started learning the violin last week."),
            ],
            "session_2_date_time": "10:00 am on 20 June, 2023",
            "session_2": [
                turn("D2:1", "Alice", "We moved to Lisbon in June."),
                turn("D2:2", "Bob", "Lovely, I visited the castle there once."),
                turn("D2:3", "Alice", "My sister works as a pilot now."),
                turn("D2:4", "Bob", "Does Marta fly long routes?"),
            ],
        },
        "qa": [
            {
                "question": "What is the name of Alice's puppy?",
                "answer": "Biscuit",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "Which city did Alice move to?",
                "answer": "Lisbon",
                "evidence": ["D2:1"],
                "category": 2,
            },
            {
                "question": "What is Bob learning?",
                "answer": "the violin",
                "evidence": ["D1:4", "D9"],
                "category": 1,
            },
            {
                "question": "What does Marta do?",
                "answer": "a pilot",
                "evidence": ["D2:3; D2:4"],
                "category": 3,
            },
            {"question": "Is Bob a pilot?", "evidence": [], "category": 5},
            {"question": "What about session 7?", "evidence": ["D7:1"], "category": 1},
        ],
    }


def turn(dia_id: str, speaker: str, text: str) -> dict[str, str]:
    return {"dia_id": dia_id, "speaker": speaker, "text": text}


@pytest.fixture
def locomo_file(tmp_path: Path) -> Path:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([locomo_sample("c1"), locomo_sample("c2")]), encoding="utf-8")
    return path


@pytest.fixture
def hashing_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real MiniLM takes longer to load than the whole run: the hashing fake keeps it short,
    # named after the choice it stands for.
    monkeypatch.setattr(eval_cli, "make_embedder", lambda choice: HashingEmbedder(name=choice))


@pytest.mark.usefixtures("hashing_embedder")
@pytest.mark.slow
def test_eval_locomo_reports_recall_at_token_budgets_beside_turn_baselines(
    locomo_file: Path,
    fresh_data_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    out_json = tmp_path / "all.json"
    cache = tmp_path / "vectors.pkl"
    args = ["eval", "locomo", "--data", str(locomo_file), "--data-dir", str(fresh_data_dir)]
    options = ["--budgets", "40,400", "--split", "c1", "--embedding-cache", str(cache)]
    options += ["--embedder", "minilm-int8"]
    assert main([*args, *options, "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    report = json.loads(out_json.read_text(encoding="utf-8"))
    assert (report["k"], report["budgets"], report["conversations"]) == (10, [40, 400], 2)
    assert report["embedder"] == "minilm-int8"
    assert (report["evidence_ids_malformed"], report["evidence_ids_missing"]) == (2, 2)
    groups = report["groups"]
    assert {name: group["conversations"] for name, group in groups.items()} == {
        "all": ["c1", "c2"],
        "tuned on": ["c1"],
        "held out": ["c2"],
    }
    methods = groups["all"]["methods"]
    assert list(methods) == [
        "stratamem",
        "search cards",
        "BM25 turns",
        "MiniLM turns",
        "BM25+MiniLM turns",
    ]
    mine = methods["stratamem"]
    assert list(mine) == ["multi-hop", "temporal", "open-domain", "single-hop", "overall"]
    overall = mine["overall"]
    assert overall["questions"] == 8
    # Each question shares a rare word with its evidence: at 400 tokens all is recalled, and
    # every budget is kept; no line is ever sent twice.
    assert overall["recall"]["400"] == 1.0
    assert overall["recall"]["40"] <= overall["recall"]["400"]
    assert overall["tokens"]["40"] <= 40 and 40 < overall["tokens"]["400"] <= 400
    assert overall["repeated"] == {"40": 0.0, "400": 0.0, "k": 0.0}
    # The search's cards as they are overlap: their lines repeat.
    assert methods["search cards"]["overall"]["repeated"]["400"] > 0
    # Single turns ranked by BM25 miss "My sister works as a pilot now." for "What does
    # Marta do?" (the turn does not name her): 7 of 8 evidence sets, and within budget.
    bm25 = methods["BM25 turns"]["overall"]
    assert bm25["recall"]["400"] == 0.875 and bm25["tokens"]["400"] <= 400
    # Answer in text: every answer is short enough to check; all are in the text at 400
    # tokens. BM25's turns hold half the Marta question's evidence (the question, not the
    # pilot): recall 0.5 for it, but no answer in text, 3 of 4 answers per conversation.
    assert overall["answerable"] == 8
    assert overall["answer_in_text"]["400"] == 1.0
    assert bm25["answer_in_text"]["400"] == 0.75
    assert "Answer in text" in out
    assert "LoCoMo, tuned on: c1" in out and "LoCoMo, held out: c2" in out
    table = [line.split() for line in out.splitlines() if line.strip()]
    assert ["stratamem", "40"] in [row[:2] for row in table]
    assert "evidence ids skipped: 2 malformed, 2 pointing at no turn" in out
    assert report["recipe"] == DEFAULT_SEARCH.name
    assert f"search recipe: {DEFAULT_SEARCH.name}" in out
    # The vectors are kept for the next run.
    assert cache.stat().st_size > 0


def test_a_missing_data_file_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "locomo", "--data", str(tmp_path / "nope.json")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().count("\n") == 0
    assert captured.err.startswith("stratamem: error: cannot read")
    assert "No such file or directory" in captured.err


@pytest.mark.parametrize("value", ["0", "ten"])
def test_a_bad_k_is_a_usage_error(
    locomo_file: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["eval", "locomo", "--data", str(locomo_file), "--k", value])
    assert caught.value.code == 2
    assert "argument --k" in capsys.readouterr().err


@pytest.mark.usefixtures("hashing_embedder")
def test_the_recipe_named_is_the_one_recall_uses(
    locomo_file: Path,
    fresh_data_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The run itself is the test above's; here only which recipe reaches the backend.
    used: list[SearchConfig] = []
    real = eval_cli.open_backend

    def recording(*args: Any) -> Any:
        used.append(args[-1])
        return real(*args)

    monkeypatch.setattr(eval_cli, "open_backend", recording)
    out_json = tmp_path / "numbers.json"
    args = ["eval", "locomo", "--data", str(locomo_file), "--limit", "1", "--budgets", "40"]
    options = ["--recipe", LISTS_CUT_CLOSE.name, "--json", str(out_json)]
    assert main([*args, "--data-dir", str(fresh_data_dir), *options]) == 0
    assert used == [LISTS_CUT_CLOSE]
    assert json.loads(out_json.read_text(encoding="utf-8"))["recipe"] == LISTS_CUT_CLOSE.name
    assert f"search recipe: {LISTS_CUT_CLOSE.name}" in capsys.readouterr().out


def test_an_unknown_recipe_is_a_usage_error(
    locomo_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["eval", "locomo", "--data", str(locomo_file), "--recipe", "nope"])
    assert caught.value.code == 2
    assert "argument --recipe" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "ten", ","])
def test_bad_budgets_are_a_usage_error(
    locomo_file: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["eval", "locomo", "--data", str(locomo_file), "--budgets", value])
    assert caught.value.code == 2
    assert "argument --budgets" in capsys.readouterr().err
