"""``MessageArchiver``: a session's stored messages become turn cards and extracted cards, and the
archive mark moves past them. Its own object, apart from recall and pins, because it is the one
path that writes what a conversation said into cards (after a fold, or when a session ends);
``LongTermMemory`` holds one (``LongTermMemory.archiver``) and the folds and jobs call it."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from memory.cards import CardExtractor, ExtractedCard, SourceMessage, resolve_date
from memory.cards.caps import cap_drafts
from memory.context.cut import cut_to_chars
from memory.context.messages import Message
from memory.longterm.card_lifecycle import CardWriter
from memory.summary.transcript import sanitize_text
from retrieval import CardDraft, Utterance, turn_card_text, turn_window
from storage import MAX_CARD_TEXT_CHARS, ArchiveMarks, Card, MessageStore, StoredMessage

__all__ = [
    "ARCHIVE_BATCH_MESSAGES",
    "EXTRACTION_BATCH_MESSAGES",
    "TURN_MESSAGE_CHARS",
    "TURN_NEIGHBOUR_CHARS",
    "MessageArchiver",
    "source_message",
]

logger = logging.getLogger(__name__)

#: The most messages one extraction call reads: a long archived range (a session ended after
#: hours, a first fold of an imported conversation) is split in chunks of this many, so a
#: prompt stays bounded (each message is cut to ``prompt_chars_per_message`` too).
EXTRACTION_BATCH_MESSAGES = 60

#: The most stored messages one step of ``archive_through`` reads, archives and then moves the
#: archive mark past: a session of 20,000 messages is archived step by step, each step's
#: messages, drafts and embeddings in memory at a time, and a crash loses one step's work
#: (a few seconds). Eight extraction batches when every message is a turn.
ARCHIVE_BATCH_MESSAGES = 8 * EXTRACTION_BATCH_MESSAGES

#: How much of a message a turn card holds (a pasted document is a message too): the message
#: itself, and each neighbour beside it. Cut with a marker saying how much was left out; the
#: message stays whole in the history.
TURN_MESSAGE_CHARS = 16_000
TURN_NEIGHBOUR_CHARS = 4_000

#: Messages loaded either side of an archived range, so its first and last turns get their
#: neighbours (tool messages between turns are skipped, hence more than one).
_NEIGHBOUR_MARGIN = 4

#: Roles whose text becomes turn cards (tool results and system messages are not turns).
_TURN_ROLES = ("user", "assistant")


class MessageArchiver:
    """Archives a session's stored messages as cards; every method is scoped by ``user_id``.

    Args:
        messages: The message store the archived ranges are read from.
        marks: How far each session is archived.
        writer: Stores the cards (a card on the subject of a valid one supersedes it).
        extractor: Extracts the cards of a range (the chat model's, or the rules offline).
    """

    def __init__(
        self,
        messages: MessageStore,
        marks: ArchiveMarks,
        writer: CardWriter,
        extractor: CardExtractor,
    ) -> None:
        self._messages = messages
        self._marks = marks
        self._writer = writer
        self._extractor = extractor

    def archive_through(self, user_id: str, session_id: str, through: int | None) -> int:
        """Archive the session's messages after its archive mark, through seq ``through``.

        ``None`` archives every message of the session (a session that ends). In steps of
        ``ARCHIVE_BATCH_MESSAGES`` messages: each step stores its cards, then moves the mark
        past its messages, so a long session is archived step by step with one step in
        memory, and a crash loses one step. A retry after a crash between the cards and the
        mark stores the same cards again, which the store merges (same content, same card;
        a message's turn card is its one turn card whatever its neighbours by then), so
        nothing is doubled.

        Returns:
            How many messages were archived.

        Raises:
            SessionErasedError: The session was erased meanwhile; what is left is not stored.
        """
        mark = self._marks.get(user_id, session_id)
        archived = 0
        while through is None or mark < through:
            upto = mark + ARCHIVE_BATCH_MESSAGES
            if through is not None:
                upto = min(upto, through)
            _, read = self.archive(user_id, session_id, mark, upto)
            if not read:
                break  # nothing after the mark: the session's end
            # A concurrent archive may have moved the mark further: go on from there.
            mark = self._marks.advance(user_id, session_id, read[-1])
            archived += len(read)
        return archived

    def archive_mark(self, user_id: str, session_id: str) -> int:
        """The seq through which the session's messages are archived as cards (0: none)."""
        return self._marks.get(user_id, session_id)

    def store_fold(
        self,
        user_id: str,
        session_id: str,
        after_seq: int,
        upto: StoredMessage,
        extracted: Sequence[ExtractedCard],
    ) -> int:
        """Archive a fold's messages ``after_seq < seq <= upto.seq`` with cards extracted already.

        For a fold whose summariser call extracted its cards too
        (``memory.longterm.summary_and_cards``): the turn cards and ``extracted`` are stored,
        then the archive mark moves to ``upto``, so
        no later archive reads these messages again (and none extracts them twice). A crash
        before the mark moves leaves cards the retry stores again, which the store merges.

        Returns:
            How many messages were archived (0 when ``upto`` is archived already).

        Raises:
            SessionErasedError: The session was erased meanwhile; what is left is not stored.
        """
        if upto.seq <= after_seq:
            return 0
        _, archived = self.archive(user_id, session_id, after_seq, upto.seq, extracted=extracted)
        self._marks.advance(user_id, session_id, upto)
        return len(archived)

    def archive(
        self,
        user_id: str,
        session_id: str,
        after_seq: int,
        upto_seq: int | None,
        *,
        extracted: Sequence[ExtractedCard] | None = None,
    ) -> tuple[list[Card], list[StoredMessage]]:
        """Store the turn cards and extracted cards of messages ``after_seq < seq <= upto``.

        Cards are extracted by the chat model (by rules offline, or when every attempt failed),
        one call per range of at most ``EXTRACTION_BATCH_MESSAGES`` messages, each batch stored
        once extracted; ``extracted`` instead stores cards a fold's shared call extracted from
        the range already (no call). A card on the same subject and attribute as a valid one
        supersedes it (``CardWriter``). A process killed midway leaves some cards stored and
        the archive mark where it was: the retry reads the same range again.
        Idempotent: a card the user already has merges its sources, so running it twice over
        the same messages adds nothing (the model answers the same batch the same way at
        temperature 0; a reworded card merges as a near-duplicate).

        Returns:
            The stored cards (existing ones included), and the messages read in the range, in
            order (tool and empty messages included: they are archived as nothing).

        Raises:
            SessionErasedError: The session was erased since its messages were read: the
                cards of the batch being stored are not stored (``storage.erasure``).
        """
        lower = max(0, after_seq - _NEIGHBOUR_MARGIN)
        upper = None if upto_seq is None else upto_seq + _NEIGHBOUR_MARGIN
        loaded = self._messages.between(user_id, session_id, lower, upper)
        turns = [
            (stored, message)
            for stored in loaded
            if stored.role in _TURN_ROLES
            and (message := Message.from_openai(stored.payload)).text.strip()
        ]

        def archived(stored: StoredMessage) -> bool:
            return after_seq < stored.seq and (upto_seq is None or stored.seq <= upto_seq)

        drafts: list[CardDraft] = []
        for position, (stored, message) in enumerate(turns):
            if archived(stored):
                window = [turns[i] for i in turn_window(len(turns), position)]
                drafts.append(_turn_card(session_id, stored, message, window))
        sources = [
            source
            for stored, message in turns
            if archived(stored) and (source := source_message(stored, message)) is not None
        ]
        by_seq = {stored.seq: stored for stored, _ in turns}
        # The turns first: what was said is findable even if extraction then takes long.
        cards = self._writer.write(user_id, drafts)
        if extracted is not None:
            cards += self._store_extracted(user_id, session_id, extracted, by_seq)
            sources = []  # extracted already: no call
        # One extraction per archived range (a fold or a session's end), never per message;
        # each batch is stored as soon as it is extracted, in the order it was said.
        for start in range(0, len(sources), EXTRACTION_BATCH_MESSAGES):
            extraction = self._extractor.extract(sources[start : start + EXTRACTION_BATCH_MESSAGES])
            cards += self._store_extracted(user_id, session_id, extraction.cards, by_seq)
        return cards, [stored for stored in loaded if archived(stored)]

    def _store_extracted(
        self,
        user_id: str,
        session_id: str,
        extracted: Sequence[ExtractedCard],
        by_seq: dict[int, StoredMessage],
    ) -> list[Card]:
        """Store extracted drafts within the card bounds (``memory.cards.caps``): a model's
        reply was capped as it was read; this holds the rules' drafts to the same sizes."""
        capped = cap_drafts(extracted, max_cards=None)
        if capped.changed:
            logger.warning(
                "cards of session %r over their bounds: %s", session_id, capped.describe()
            )
        drafts = [_stored_draft(session_id, draft, by_seq) for draft in capped.cards]
        return self._writer.write(user_id, drafts)


def source_message(stored: StoredMessage, message: Message) -> SourceMessage | None:
    """What extraction reads of a stored message; ``None`` for one that is not a turn.

    Only the user's and the assistant's words with text are turns: tool results and calls are
    context, never a card's source.
    """
    if stored.role not in _TURN_ROLES or not message.text.strip():
        return None
    return SourceMessage(
        role=message.role,
        text=message.text,
        time=stored.created_at,
        index=stored.seq,
        id=str(stored.id),
    )


def _turn_card(
    session_id: str,
    stored: StoredMessage,
    message: Message,
    window: Sequence[tuple[StoredMessage, Message]],
) -> CardDraft:
    """The turn card of one message: it and its neighbours, dated, as measured best; keyed
    by the message (the store keeps one turn card per message)."""
    utterances = [
        Utterance(
            speaker=_speaker(m),
            text=cut_to_chars(
                m.text.strip(), TURN_MESSAGE_CHARS if s is stored else TURN_NEIGHBOUR_CHARS
            ),
        )
        for s, m in window
    ]
    resolved = resolve_date(message.text, stored.created_at)
    text = turn_card_text(utterances, day=stored.created_at.date())
    return CardDraft(
        type="turn",
        text=sanitize_text(cut_to_chars(text, MAX_CARD_TEXT_CHARS)),
        turn_message_id=stored.id,
        session_id=session_id,
        tags=[message.role],
        source_message_ids=[s.id for s, _ in window],
        source_client_ids=[s.client_id for s, _ in window if s.client_id is not None],
        observed_at=stored.created_at,
        occurred_at=resolved.occurred_at if resolved else None,
    )


def _stored_draft(
    session_id: str, draft: ExtractedCard, by_seq: dict[int, StoredMessage]
) -> CardDraft:
    """An extracted card as the index stores it, its sources named by stored and client ids."""
    sources = [by_seq[seq] for seq in draft.source_indices if seq in by_seq]
    return CardDraft(
        type=draft.type,
        text=sanitize_text(draft.text),
        topic=sanitize_text(draft.topic) if draft.topic else None,
        tags=[sanitize_text(tag) for tag in draft.tags],
        session_id=session_id,
        # The ids the card was extracted from, not those found again now: stored only while
        # the session holds them (``storage.erasure``), erased or not since.
        source_message_ids=[int(i) for i in draft.source_ids] or [s.id for s in sources],
        source_client_ids=[s.client_id for s in sources if s.client_id is not None],
        observed_at=draft.observed_at,
        occurred_at=draft.occurred_at,
        subject=sanitize_text(draft.subject) if draft.subject else None,
        attribute=sanitize_text(draft.attribute) if draft.attribute else None,
    )


def _speaker(message: Message) -> str:
    """Who said it, as a turn card shows it: the message's ``name``, else its role."""
    return message.name or message.role.capitalize()
