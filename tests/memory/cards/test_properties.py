"""Properties over arbitrary text: the judgment functions are total and stable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from memory.cards.dates import resolve_date, time_range_of_query
from memory.cards.model import SourceMessage, _normalized_text_hash, normalize_text
from memory.cards.rewrite import rewrite_query
from memory.cards.rules import extract_by_rules
from memory.context.messages import Message

# Text mixing the words the rules look for with arbitrary characters, English and Chinese.
VOCABULARY = (
    "I my name is am live in moved to like don't prefer we use decided remind me need finished "
    "it its that this yesterday last next May Friday 3 days ago week 2023-05-07 7 Porto Ana "
    "我 叫 王芳 住在 喜欢 不 我们 用的是 决定 提醒 记得 完成了 昨天 上周五 去年 三天前 5月7日 "
    "它 这个 那个 方案 , . ? \uff01 。"
)
WORDS = st.sampled_from(VOCABULARY.split())
TEXT = st.one_of(
    st.text(max_size=80),
    st.lists(st.one_of(WORDS, st.text(max_size=5)), max_size=20).map(" ".join),
)
WHEN = st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2090, 1, 1), timezones=st.just(UTC)
)


@given(TEXT)
def test_normalizing_twice_changes_nothing(text: str) -> None:
    once = normalize_text(text)
    assert normalize_text(once) == once
    assert _normalized_text_hash(text) == _normalized_text_hash(once)


@settings(max_examples=300)
@given(TEXT, WHEN)
def test_a_resolved_date_is_a_period_start_near_the_reference(text: str, when: datetime) -> None:
    resolved = resolve_date(text, when)
    if resolved is not None:
        assert resolved.occurred_at.tzinfo is when.tzinfo
        assert resolved.occurred_at.hour == resolved.occurred_at.minute == 0
        assert resolved.phrase in text
    span = time_range_of_query(text, when)
    if span is not None:
        since, until = span
        assert since < until <= since + timedelta(days=366)


@settings(max_examples=300)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant"]), TEXT), max_size=4), WHEN)
def test_rules_never_fail_and_cards_are_about_the_user(
    said: list[tuple[str, str]], when: datetime
) -> None:
    messages = [SourceMessage(role, text, when, i) for i, (role, text) in enumerate(said)]
    user = {m.index for m in messages if m.role == "user"}

    drafts = extract_by_rules(messages)

    for draft in drafts:
        assert draft.text.strip()
        assert set(draft.source_indices) <= user
        assert draft.observed_at == when
    assert len({draft.normalized for draft in drafts}) == len(drafts)


@settings(max_examples=300)
@given(TEXT, st.lists(TEXT, max_size=3))
def test_a_rewrite_without_a_model_is_the_input_or_resolved_by_rules(
    said: str, recent: list[str]
) -> None:
    messages = [Message(role="user", content=text) for text in recent]

    rewrite = rewrite_query(said, messages)

    assert rewrite.method in ("rules", "original")
    assert rewrite.calls == 0
    if rewrite.method == "original" or rewrite.antecedent is None:
        assert rewrite.query == said
    else:
        assert rewrite.antecedent in rewrite.query
