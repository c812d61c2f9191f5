"""Near-duplicate cards merge their sources on the way in (real MiniLM, real Postgres)."""

import pytest

from retrieval import CardDraft, CardIndex


def profile(text: str, source: str, **fields: object) -> CardDraft:
    return CardDraft.model_validate(
        {"type": "profile", "text": text, "source_client_ids": [source], **fields}
    )


@pytest.mark.slow
def test_a_rewording_merges_into_the_stored_card(index: CardIndex, user_id: str) -> None:
    [first] = index.add(user_id, [profile("User lives in Berlin", "m1")])
    [again] = index.add(user_id, [profile("The user lives in Berlin.", "m2")])

    assert again.id == first.id
    assert again.text == "User lives in Berlin"
    assert again.source_client_ids == ["m1", "m2"]
    assert [card.id for card in index.store.list_cards(user_id)] == [first.id]


@pytest.mark.slow
def test_a_new_value_is_a_new_card_not_a_merge(index: CardIndex, user_id: str) -> None:
    # These sit close in MiniLM (the benchmark's pairs); they must supersede, never merge.
    pairs = [
        ("User lives in Berlin", "User lives in Lisbon"),
        ("User is 34 years old", "User is 35 years old"),
        ("用户喜欢喝茶", "用户喜欢喝咖啡"),
        ("To do: send the invoice to Bob", "Done: send the invoice to Bob"),
    ]
    for old, new in pairs:
        [a] = index.add(user_id, [profile(old, "m1")])
        [b] = index.add(user_id, [profile(new, "m2")])
        assert a.id != b.id, (old, new)


def test_a_rewording_inside_one_batch_is_one_card(index: CardIndex, user_id: str) -> None:
    cards = index.add(
        user_id,
        [
            profile("User is allergic to peanuts", "m1"),
            profile("User likes hiking", "m2"),
            profile("The user is allergic to peanuts.", "m3"),
        ],
    )
    assert cards[0] == cards[2] and cards[0].id != cards[1].id
    assert cards[0].source_client_ids == ["m1", "m3"]
    assert len(index.store.list_cards(user_id)) == 2


@pytest.mark.slow
def test_turns_pins_other_types_and_superseded_cards_never_absorb_a_draft(
    index: CardIndex, user_id: str
) -> None:
    [turn] = index.add(user_id, [CardDraft(type="turn", text="User lives in Berlin")])
    [fact] = index.add(user_id, [CardDraft(type="fact", text="The user lives in Berlin.")])
    [pin] = index.add(user_id, [profile("User lives in Berlin", "m1", pinned=True)])
    [draft] = index.add(user_id, [profile("The user lives in Berlin!", "m2")])
    # A profile draft merges into the profile card (pinned or not), never the turn or the fact.
    assert draft.id == pin.id and len({turn.id, fact.id, pin.id}) == 3
    [turn_again] = index.add(user_id, [CardDraft(type="turn", text="User lives in Berlin.")])
    assert turn_again.id not in {turn.id, fact.id, pin.id}

    [old] = index.add(user_id, [profile("User works at Acme", "m3")])
    [new] = index.add(user_id, [profile("User works at Globex", "m4")])
    index.store.supersede(user_id, old.id, new.id)
    [reworded] = index.add(user_id, [profile("The user works at Acme.", "m5")])
    assert reworded.id not in {old.id, new.id}
