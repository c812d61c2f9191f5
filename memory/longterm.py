"""``LongTermMemory``: a user's cards: archived turns, extracted cards, pins, search and recall.

The facade owns one; it turns stored messages into cards (``archive``), answers ``search``,
keeps pins within their budget, and recalls the memories of one request (``recall``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from memory.card_lifecycle import CardWriter
from memory.cards import CardDraft as ExtractedDraft
from memory.cards import (
    CardExtractor,
    ExtractionEvent,
    RulesFallback,
    SourceMessage,
    resolve_date,
    rewrite_query,
    time_range_of_query,
)
from memory.context.messages import Message
from memory.context.parts import RetrievedMemory, memories_message
from memory.context.report import RecalledCard, RecallState
from memory.context.tokens import TokenCounter
from memory.errors import CardNotFoundError, PinBudgetError
from memory.llm import ChatModel, LLMChain
from memory.settings import CardSettings, SummarySettings
from retrieval import (
    CardDraft,
    CardIndex,
    CardQuery,
    Embedder,
    HashingEmbedder,
    PrefetchingEmbedder,
    ScoredCard,
    SentenceTransformerEmbedder,
    Utterance,
    turn_card_text,
    turn_window,
)
from storage import (
    ArchiveMarks,
    Card,
    CardFilter,
    CardStore,
    Database,
    MessageStore,
    StoredMessage,
)

__all__ = [
    "EXTRACTION_BATCH_MESSAGES",
    "LongTermMemory",
    "Recall",
    "default_embedder",
    "source_message",
]

logger = logging.getLogger(__name__)

#: The most messages one extraction call reads: a long archived range (a session ended after
#: hours, a first fold of an imported conversation) is split in chunks of this many, so a
#: prompt stays bounded (each message is cut to ``prompt_chars_per_message`` too).
EXTRACTION_BATCH_MESSAGES = 60

#: Messages loaded either side of an archived range, so its first and last turns get their
#: neighbours (tool messages between turns are skipped, hence more than one).
_NEIGHBOUR_MARGIN = 4

#: The longest a query rewrite may wait for the model, in seconds: it is on the request path,
#: so one attempt, no fallback model, and the original text when it is late.
REWRITE_TIMEOUT_S = 3.0

#: Roles whose text becomes turn cards (tool results and system messages are not turns).
_TURN_ROLES = ("user", "assistant")


def default_embedder(settings: CardSettings) -> Embedder:
    """The embedder the settings name; MiniLM loads on its first ``embed``, never before."""
    if settings.embedder == "hashing":
        return HashingEmbedder()
    return SentenceTransformerEmbedder()


@dataclass(frozen=True, slots=True)
class Recall:
    """What one request recalled: the memories for the prompt and their report."""

    memories: tuple[RetrievedMemory, ...]
    state: RecallState


class LongTermMemory:
    """The cards of every user, scoped by user in every method."""

    def __init__(
        self,
        database: Database,
        messages: MessageStore,
        embedder: Embedder,
        counter: TokenCounter,
        settings: CardSettings,
        *,
        pin_budget: int,
        chat: ChatModel | None = None,
        summary: SummarySettings | None = None,
        on_extraction_event: Callable[[ExtractionEvent | RulesFallback], None] | None = None,
    ) -> None:
        """Open the card store for ``embedder``'s model (a mismatch is a clear error now).

        Args:
            database: The database.
            messages: The message store archived ranges are read from.
            embedder: The embedder of the cards.
            counter: Counts the tokens of pins.
            settings: The cards settings.
            pin_budget: The most tokens the user's pins may take.
            chat: The chat model (the summariser's): it extracts cards, and ``recall`` asks it
                to rewrite an input the rules cannot resolve. ``None``: rules only (offline).
            summary: The summariser's settings: models, retries, timeouts and backoff of the
                extraction and rewrite calls too.
            on_extraction_event: Also receives every extraction event (all are logged).

        Raises:
            storage.EmbeddingModelMismatchError: the database holds another model's vectors.
        """
        store = CardStore(database, model=embedder.name, dimension=embedder.dimension)
        # Queries may be embedded ahead of their search (``prefetch``); batches pass through.
        self._queries = PrefetchingEmbedder(embedder)
        self.index = CardIndex(store, self._queries)
        self._writer = CardWriter(self.index)
        self._on_extraction_event = on_extraction_event
        self.extractor = CardExtractor(chat, summary, on_event=self._extraction_event)
        self._marks = ArchiveMarks(database)
        self._messages = messages
        self._counter = counter
        self._settings = settings
        #: The most tokens the user's pins may take in a request.
        self.pin_budget = pin_budget
        self._rewriter = _rewrite_chain(chat, summary) if chat is not None else None

    def extractor_for(self, settings: SummarySettings) -> CardExtractor:
        """An extractor with other chain settings (a job's), reporting to the same events."""
        return CardExtractor(self.extractor.chat_model, settings, on_event=self._extraction_event)

    @property
    def store(self) -> CardStore:
        """The card store."""
        return self.index.store

    # --- writing ----------------------------------------------------------------------------

    def archive_through(self, user_id: str, session_id: str, through: int | None) -> int:
        """Archive the session's messages after its archive mark, through seq ``through``.

        ``None`` archives every message of the session (a session that ends). The mark moves
        only after the cards are stored; a retry after a failure in between stores the same
        cards again, which the store merges (same content, same card), so nothing is doubled.

        Returns:
            How many messages were archived.
        """
        mark = self._marks.get(user_id, session_id)
        if through is not None and through <= mark:
            return 0
        _, archived = self.archive(user_id, session_id, mark, through)
        if archived:
            self._marks.advance(user_id, session_id, max(archived))
        return len(archived)

    def archive_mark(self, user_id: str, session_id: str) -> int:
        """The seq through which the session's messages are archived as cards (0: none)."""
        return self._marks.get(user_id, session_id)

    def store_fold(
        self,
        user_id: str,
        session_id: str,
        after_seq: int,
        upto_seq: int,
        extracted: Sequence[ExtractedDraft],
    ) -> int:
        """Archive a fold's messages ``after_seq < seq <= upto_seq`` with cards extracted already.

        For a fold whose summariser call extracted its cards too (``memory.shared_fold``): the
        turn cards and ``extracted`` are stored, then the archive mark moves to ``upto_seq``,
        so no later archive reads these messages again (and none extracts them twice). A crash
        before the mark moves leaves cards the retry stores again, which the store merges.

        Returns:
            How many messages were archived (0 when ``upto_seq`` is archived already).
        """
        if upto_seq <= after_seq:
            return 0
        _, archived = self.archive(user_id, session_id, after_seq, upto_seq, extracted=extracted)
        self._marks.advance(user_id, session_id, upto_seq)
        return len(archived)

    def archive(
        self,
        user_id: str,
        session_id: str,
        after_seq: int,
        upto_seq: int | None,
        *,
        extracted: Sequence[ExtractedDraft] | None = None,
    ) -> tuple[list[Card], list[int]]:
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
            The stored cards (existing ones included), and the seqs of the messages read in the
            range (tool and empty messages included: they are archived as nothing).
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
            stored_drafts = [_stored_draft(session_id, draft, by_seq) for draft in extracted]
            cards += self._writer.write(user_id, stored_drafts)
            sources = []  # extracted already: no call
        # One extraction per archived range (a fold or a session's end), never per message;
        # each batch is stored as soon as it is extracted, in the order it was said.
        for start in range(0, len(sources), EXTRACTION_BATCH_MESSAGES):
            extraction = self.extractor.extract(sources[start : start + EXTRACTION_BATCH_MESSAGES])
            batch = [_stored_draft(session_id, draft, by_seq) for draft in extraction.cards]
            cards += self._writer.write(user_id, batch)
        seqs = [stored.seq for stored in loaded if archived(stored)]
        return cards, seqs

    def _extraction_event(self, event: ExtractionEvent | RulesFallback) -> None:
        """Log an extraction event and pass it on.

        At INFO: the chain warns about failed attempts already, and the extractor about the
        rules taking over; this line adds which messages the call was about.
        """
        if isinstance(event, ExtractionEvent):
            logger.log(
                logging.INFO,
                "card extraction %s: model %s, %d messages, %d+%d tokens, %.2f s%s",
                event.kind, event.model, event.messages, event.tokens_in, event.tokens_out,
                event.duration_s, f", error: {event.error}" if event.error else "",
            )  # fmt: skip
        if self._on_extraction_event is not None:
            self._on_extraction_event(event)

    def pin(
        self,
        user_id: str,
        text: str,
        *,
        session_id: str | None = None,
        topic: str | None = None,
        tags: Sequence[str] | None = None,
    ) -> Card:
        """Store ``text`` as a pinned fact card (or pin the same card already stored).

        Raises:
            PinBudgetError: the user's pins with this one would exceed ``pin_budget`` tokens.
            ValueError: ``text`` is blank.
        """
        if not text.strip():
            raise ValueError("a pin needs a text")
        pinned = [_memory(card, 1.0) for card in self.pins(user_id)]
        required = self._counter.count_message(
            _must(memories_message([*pinned, RetrievedMemory(text=text.strip(), score=1.0)]))
        )
        if required > self.pin_budget:
            raise PinBudgetError(required, self.pin_budget)
        draft = CardDraft(
            type="fact",
            text=text.strip(),
            session_id=session_id,
            topic=topic,
            tags=list(tags or ()),
            pinned=True,
        )
        [card] = self.index.add(user_id, [draft])
        return card if card.pinned else self.store.set_pinned(user_id, card.id, True)

    def unpin(self, user_id: str, card_id: int) -> Card:
        """Unpin one of the user's cards (kept as an ordinary card).

        Raises:
            CardNotFoundError: the user has no such card.
        """
        try:
            return self.store.set_pinned(user_id, card_id, False)
        except LookupError as error:
            raise CardNotFoundError(f"user {user_id!r} has no card {card_id}") from error

    def pins(self, user_id: str) -> list[Card]:
        """The user's pinned cards, oldest first."""
        return self.store.list_cards(user_id, CardFilter(pinned=True, include_superseded=True))

    # --- reading ----------------------------------------------------------------------------

    def prefetch(self, text: str) -> None:
        """Start embedding ``text`` in the background: the input of a ``prepare`` whose
        ``recall`` will likely search it as written, once the input is stored and the window
        read (``retrieval.prefetch``). Does nothing when recall searches no cards (``k=0``)."""
        if self._settings.k > 0 and text.strip():
            self._queries.prefetch(text)

    def search(
        self, user_id: str, query: str, request: CardQuery, *, now: datetime | None = None
    ) -> list[ScoredCard]:
        """The user's ``request.k`` cards best matching ``query`` (see ``CardIndex.search``).

        A query naming a time (``"last week"``, ``"in May 2023"``, ``"上个月"``) boosts the
        cards said or happening then, resolved against ``now`` (the clock by default).
        """
        during = time_range_of_query(query, now or datetime.now(UTC))
        return self.index.search(user_id, query, request.model_copy(update={"during": during}))

    def recall(self, user_id: str, window: Sequence[tuple[StoredMessage, Message]]) -> Recall:
        """The memories of one request: pins first, then the cards best matching its input.

        The input is the newest user message of ``window``; the messages before it resolve its
        references (``rewrite_query``: rules, then the chat model when one is configured and the
        rules cannot decide, then the input as written). The rewrite is searched, never shown:
        the prompt keeps the user's message. A time the input names (``"last week"``) boosts
        the cards of that time, counted from when the message was stored. Cards all of whose
        sources are in the window are left out: the model sees those messages already.
        """
        pins = self.pins(user_id)
        memories = [_memory(card, 1.0) for card in pins]
        recalled = [RecalledCard(card.id, 1.0, True, card.type) for card in pins]
        last_user = next(
            (i for i in range(len(window) - 1, -1, -1) if window[i][1].role == "user"), None
        )
        query: str | None = None
        method: str | None = None
        if last_user is not None and self._settings.k > 0:
            stored, message = window[last_user]
            rewrite = rewrite_query(
                message.text, [m for _, m in window[:last_user]], chat=self._rewriter
            )
            query, method = rewrite.query, rewrite.method
            in_window = {stored.id for stored, _ in window}
            pinned = {card.id for card in pins}
            hits = self.index.search(
                user_id,
                query,
                CardQuery(
                    k=self._settings.k + len(pins) + 2 * len(window),
                    during=time_range_of_query(query, stored.created_at),
                    min_score=self._settings.min_score,
                ),
            )
            fresh = [
                hit
                for hit in hits
                if hit.card.id not in pinned
                and not (
                    hit.card.source_message_ids and set(hit.card.source_message_ids) <= in_window
                )
            ][: self._settings.k]
            memories += [_memory(hit.card, hit.score) for hit in fresh]
            recalled += [
                RecalledCard(hit.card.id, hit.score, False, hit.card.type) for hit in fresh
            ]
        return Recall(tuple(memories), RecallState(query, method, tuple(recalled)))


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


def _rewrite_chain(chat: ChatModel, summary: SummarySettings | None) -> LLMChain:
    """The chain that rewrites queries: the summariser's model, one short attempt.

    A user waits for ``prepare``: the summariser's six attempts of 60 s each would turn a slow
    model into a minute-long request, while the original text is a fine query most of the time.
    """
    settings = summary or SummarySettings()
    quick = settings.model_copy(
        update={
            "retries": 1,
            "fallback_retries": 0,
            "timeout": min(settings.timeout, REWRITE_TIMEOUT_S),
        }
    )
    return LLMChain.for_settings(chat, quick, temperature=0.0)


def _turn_card(
    session_id: str,
    stored: StoredMessage,
    message: Message,
    window: Sequence[tuple[StoredMessage, Message]],
) -> CardDraft:
    """The turn card of one message: it and its neighbours, dated, as measured best."""
    utterances = [Utterance(speaker=_speaker(m), text=m.text.strip()) for _, m in window]
    resolved = resolve_date(message.text, stored.created_at)
    return CardDraft(
        type="turn",
        text=turn_card_text(utterances, day=stored.created_at.date()),
        session_id=session_id,
        tags=[message.role],
        source_message_ids=[s.id for s, _ in window],
        source_client_ids=[s.client_id for s, _ in window if s.client_id is not None],
        observed_at=stored.created_at,
        occurred_at=resolved.occurred_at if resolved else None,
    )


def _stored_draft(
    session_id: str, draft: ExtractedDraft, by_seq: dict[int, StoredMessage]
) -> CardDraft:
    """An extracted card as the index stores it, its sources named by stored and client ids."""
    sources = [by_seq[seq] for seq in draft.source_indices if seq in by_seq]
    return CardDraft(
        type=draft.type,
        text=draft.text,
        topic=draft.topic,
        tags=list(draft.tags),
        session_id=session_id,
        source_message_ids=[s.id for s in sources],
        source_client_ids=[s.client_id for s in sources if s.client_id is not None],
        observed_at=draft.observed_at,
        occurred_at=draft.occurred_at,
        subject=draft.subject,
        attribute=draft.attribute,
    )


def _speaker(message: Message) -> str:
    """Who said it, as a turn card shows it: the message's ``name``, else its role."""
    return message.name or message.role.capitalize()


def _memory(card: Card, score: float) -> RetrievedMemory:
    """A card as a memory of the prompt, with its date (turn cards carry theirs already).

    A pin is shown as written: it holds whenever it was said, and its tokens are known when it
    is pinned (the pin budget is checked then).
    """
    text = card.text
    if card.type != "turn" and not card.pinned:
        when = card.occurred_at or card.observed_at
        text = f"[{when.day} {when.strftime('%B')} {when.year}] {text}"
    return RetrievedMemory(text=text, score=score, pinned=card.pinned, id=str(card.id))


def _must(message: Message | None) -> Message:
    if message is None:
        raise ValueError("no memories to render")  # never: called with at least one memory
    return message
