"""``LongTermMemory``: a user's cards: archived turns, extracted cards, pins, search and recall.

The facade owns one; it holds the ``MessageArchiver`` that turns stored messages into cards
(``archiver``, from ``memory.longterm.archiving``), answers ``search``, keeps pins within their
budget, and recalls the memories of one request (``recall``; the memories and report lines it
hands on are made in ``memory.longterm.recalled_memories``). Cards are read and searched
through ``retrieval.CardIndex``: on the way of a request, long-term memory calls ``retrieval``
only, never ``storage`` itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import cache, partial

from memory.cards import (
    CardExtractor,
    ExtractionEvent,
    RulesFallback,
    rewrite_query,
    time_range_of_query,
)
from memory.cards.asking import asks_about_now, asks_about_the_past
from memory.cards.rewrite import Deadline
from memory.context.messages import Message
from memory.context.parts import RetrievedMemory, memories_message
from memory.context.report import RecalledCard, RecallState
from memory.context.tokens import TokenCounter
from memory.errors import CardNotFoundError, PinBudgetError
from memory.llm import ChatModel, LLMChain
from memory.longterm.archiving import MessageArchiver
from memory.longterm.card_lifecycle import CardWriter
from memory.longterm.recall_ahead import RecallAhead, RecallReads
from memory.longterm.recalled_memories import (
    Recall,
    card_memory,
    memory_tokens,
    recalled_excerpt,
)
from memory.longterm.validity import current_first, named_current, why_brought
from memory.settings import CardSettings, SummarySettings
from retrieval import (
    CardDraft,
    CardIndex,
    CardQuery,
    Embedder,
    HashingEmbedder,
    OnnxEmbedder,
    PrefetchingEmbedder,
    ScoredCard,
    relevant_cards,
    search_config_for,
)
from retrieval.excerpt_walk import Questions
from retrieval.excerpts import pricing_excerpts
from retrieval.later_statements import LaterStatements, with_later_statements
from storage import (
    ArchiveMarks,
    Card,
    CardStore,
    Database,
    MessageStore,
    StoredMessage,
)

__all__ = ["LongTermMemory", "Recall", "default_embedder"]

logger = logging.getLogger(__name__)


def default_embedder(settings: CardSettings) -> Embedder:
    """The embedder the settings name; MiniLM loads on its first ``embed``, never before.

    MiniLM runs on ONNX Runtime (exported once from the packaged weights), or on torch, the
    reference, where that is not possible; ``minilm-int8`` on ONNX Runtime only.
    """
    if settings.embedder == "hashing":
        return HashingEmbedder()
    return OnnxEmbedder(int8=settings.embedder == "minilm-int8")


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
                to rewrite an input the rules cannot resolve, within
                ``settings.rewrite_deadline_ms`` (0: never). ``None``: rules only (offline).
            summary: The summariser's settings: models, retries, timeouts and backoff of the
                extraction and rewrite calls too.
            on_extraction_event: Also receives every extraction event (all are logged).

        Raises:
            storage.EmbeddingModelMismatchError: the database holds another model's vectors.
        """
        store = CardStore(database, model=embedder.name, dimension=embedder.dimension)
        # Queries may be embedded ahead of their search (``prefetch``); batches pass through.
        self._queries = PrefetchingEmbedder(embedder)
        self._reads = RecallReads()
        self.index = CardIndex(store, self._queries, config=search_config_for(embedder))
        self._on_extraction_event = on_extraction_event
        self.extractor = CardExtractor(chat, summary, on_event=self._extraction_event)
        #: Archives stored messages as cards (folds, jobs and ``end_session`` call it).
        self.archiver = MessageArchiver(
            messages, ArchiveMarks(database), CardWriter(self.index), self.extractor
        )
        self._counter = counter
        self._settings = settings
        #: The most tokens the user's pins may take in a request.
        self.pin_budget = pin_budget
        deadline_s = settings.rewrite_deadline_ms / 1000
        self._rewriter = _rewrite_chain(chat, summary, deadline_s) if chat and deadline_s else None
        self._rewrite_deadline = Deadline(deadline_s) if deadline_s else None

    def extractor_for(self, settings: SummarySettings) -> CardExtractor:
        """An extractor with other chain settings (a job's), reporting to the same events."""
        return CardExtractor(self.extractor.chat_model, settings, on_event=self._extraction_event)

    @property
    def store(self) -> CardStore:
        """The card store."""
        return self.index.store

    # --- writing ----------------------------------------------------------------------------

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
        pinned = [card_memory(card, 1.0) for card in self.pins(user_id)]
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
        return self.index.pins(user_id)

    # --- reading ----------------------------------------------------------------------------

    def prefetch(self, text: str) -> None:
        """Start embedding ``text`` in the background: the input of a ``prepare`` whose
        ``recall`` will likely search it as written, once the input is stored and the window
        read (``retrieval.prefetch``). Does nothing when recall searches no cards (``k=0``)."""
        if self._settings.k > 0 and text.strip():
            self._queries.prefetch(text)

    def recall_ahead(self, user_id: str, text: str) -> RecallAhead:
        """Start reading the pins and searching ``text`` as written on another thread: the
        input of a ``prepare``, while it is stored (``memory.longterm.recall_ahead``)."""
        wanted = self._candidates() + 2 if self._settings.k > 0 and text.strip() else 0
        return self._reads.start(self.index, lambda: self.pins(user_id), user_id, text, wanted)

    def search(
        self, user_id: str, query: str, request: CardQuery, *, now: datetime | None = None
    ) -> list[ScoredCard]:
        """The user's ``request.k`` cards best matching ``query`` (see ``CardIndex.search``).

        A query naming a time (``"last week"``, ``"in May 2023"``, ``"上个月"``) boosts the
        cards said or happening then, resolved against ``now`` (the clock by default).
        """
        during = time_range_of_query(query, now or datetime.now(UTC))
        return self.index.search(user_id, query, request.model_copy(update={"during": during}))

    def recall(
        self,
        user_id: str,
        window: Sequence[tuple[StoredMessage, Message]],
        ahead: RecallAhead | None = None,
    ) -> Recall:
        """The memories of one request: pins first, then the cards best matching its input.

        The input is the newest user message of ``window``; the messages before it resolve its
        references (``rewrite_query``: rules, then, when the rules cannot decide, the chat model
        if one is configured with a rewrite deadline, waited for that long at most, then the
        input as written). The rewrite is searched, never shown:
        the prompt keeps the user's message. A time the input names (``"last week"``) boosts
        the cards of that time, counted from when the message was stored. Cards all of whose
        sources are in the window are left out: the model sees those messages already.

        The cards found become at most ``k`` memories within ``max_tokens``
        (``retrieval.excerpts``, each memory priced by ``memory_tokens``): below the
        relevance gate nothing is sent, and overlapping turn cards are merged line by line, so
        no line is sent twice.

        ``ahead`` (``recall_ahead``) has read the pins and maybe made the first search.
        """
        pins = ahead.pins() if ahead is not None else self.pins(user_id)
        memories = [card_memory(card, 1.0) for card in pins]
        recalled = [RecalledCard(card.id, 1.0, True, card.type, reason="pinned") for card in pins]
        last_user = next(
            (i for i in range(len(window) - 1, -1, -1) if window[i][1].role == "user"), None
        )
        query: str | None = None
        method: str | None = None
        if last_user is not None and self._settings.k > 0:
            stored, message = window[last_user]
            rewrite = rewrite_query(
                message.text,
                [m for _, m in window[:last_user]],
                chat=self._rewriter,
                deadline=self._rewrite_deadline,
            )
            query, method = rewrite.query, rewrite.method
            pinned = {card.id for card in pins}
            found = self._fresh_hits(
                user_id,
                query,
                time_range_of_query(query, stored.created_at),
                pinned=pinned,
                in_window={stored.id for stored, _ in window},
                ahead=ahead,
            )
            # Only what passes the relevance gate is weighed, and changed facts are looked up
            # for those only: the current value of a fact first, stale memories marked and
            # after it; nothing is cut here: the excerpts stop at k memories or the budget.
            terms = self.index.terms(query)
            fresh = relevant_cards(
                found, terms, self.index.config, min_similarity=self._settings.min_score
            )
            now = asks_about_now(query)
            later = LaterStatements(fresh, {}, set())
            if now:  # a change no rule read, said in words the gate did not let through
                later = with_later_statements(
                    found, fresh, terms, self.index.config, min_similarity=self._settings.min_score
                )
                fresh = later.hits
            widened = self._settings.model_copy(update={"k": max(len(fresh), self._settings.k)})
            searched = {hit.card.id for hit in fresh}
            fresh = current_first(
                self.index,
                user_id,
                query,
                fresh,
                widened,
                pinned,
                read_ahead=ahead.keyed_from_messages if ahead is not None else None,
            )
            brought = {hit.card.id for hit in fresh} - searched
            named = named_current(query, fresh) - later.changed
            # A question about the past gets the values that held before on top of k (as
            # ``current_first`` gives them), in their rank, not after the current ones.
            past = asks_about_the_past(query)
            older = sum(1 for h in fresh if h.card.id in brought and h.card.valid_to is not None)
            pricing = pricing_excerpts(
                fresh,
                terms,
                self.index.config,
                k=self._settings.k + (older if past else 0),
                max_tokens=self._settings.max_tokens,
                min_similarity=self._settings.min_score,
                vouched=later.why
                | {h.card.id: why_brought(h.card) for h in fresh if h.card.id in brought},
                first=named,
                stale_last=not past,
                newest_first=now,
                question=query,
            )
            questions = Questions(pricing)
            # Each text counted once: the walk asks again, the report counts what it priced.
            tokens = cache(partial(memory_tokens, self._counter))
            for text in questions:  # answered here: the walk never calls up into memory
                questions.answer(tokens(text))
            excerpts = questions.result
            memories += [
                RetrievedMemory(text=e.text, score=e.score, id=str(e.cards[0].card.id))
                for e in excerpts
            ]
            recalled += [recalled_excerpt(e, tokens(e.text)) for e in excerpts]
        return Recall(tuple(memories), RecallState(query, method, tuple(recalled)))

    def _fresh_hits(
        self,
        user_id: str,
        query: str,
        during: tuple[datetime, datetime] | None,
        *,
        pinned: set[int],
        in_window: set[int],
        ahead: RecallAhead | None = None,
    ) -> list[ScoredCard]:
        """The best cards for ``query`` that are neither pinned nor all in the window, as many
        as recall weighs (``_candidates``) and two more.

        The search asks for that many plus the pins, and again for twice as many while cards
        of the window took places (a session ended and resumed: its messages have cards).
        It used to ask for two more per message of the window whatever the window held: in
        a long session 400 cards, each gated, fetched and weighed, for the same 16.
        """
        wanted = self._candidates() + 2
        k = wanted + len(pinned)
        hits = ahead.hits(query, during, k) if ahead is not None else None
        while True:
            if hits is None:
                hits = self.index.search(
                    user_id,
                    query,
                    CardQuery(
                        k=k,
                        during=during,
                        diversify=False,  # overlapping cards are merged line by line later
                    ),
                )
            fresh = [
                hit
                for hit in hits
                if hit.card.id not in pinned
                and not (
                    hit.card.source_message_ids and set(hit.card.source_message_ids) <= in_window
                )
            ]
            if len(fresh) >= wanted or len(hits) < k:
                return fresh[:wanted]
            k *= 2
            hits = None

    def _candidates(self) -> int:
        """How many cards recall weighs: enough for ``k`` memories of overlapping turn cards,
        all the recipe allows when a token budget decides where to stop."""
        most = self.index.config.excerpt_cards
        return most if self._settings.max_tokens is not None else min(most, 4 * self._settings.k)


def _rewrite_chain(chat: ChatModel, summary: SummarySettings | None, deadline_s: float) -> LLMChain:
    """The chain that rewrites queries: the summariser's model, one attempt within the deadline.

    A user waits for ``prepare``: the summariser's six attempts of 60 s each would turn a slow
    model into a minute-long request, while the original text is a fine query most of the time.
    The ``Deadline`` bounds the wait; the client's own timeout, the same, ends an abandoned
    call soon after, so it does not hold its thread and connection for a minute.
    """
    settings = summary or SummarySettings()
    quick = settings.model_copy(
        update={
            "retries": 1,
            "fallback_retries": 0,
            "timeout": min(settings.timeout, deadline_s),
        }
    )
    return LLMChain.for_settings(chat, quick, temperature=0.0)


def _must(message: Message | None) -> Message:
    if message is None:
        raise ValueError("no memories to render")  # never: called with at least one memory
    return message
