"""The OpenAI Agents SDK's ``Session`` on stratamem, and a model input built from its layers.

``StratamemSession(session_id, memory=mem, user_id=...)`` is a ``Session`` (``get_items``,
``add_items``, ``pop_item``, ``clear_session``) that answers as the SDK's ``SQLiteSession``
does on the same calls. Its items (Responses-API items) are stored whole in a stratamem
session of the same id, as messages that keep them in their metadata
(``memory.integrations.responses_items``): a reasoning item stays with its message, a call with
its results. Stratamem windows, summarises and remembers that conversation like any other, and
``Memory.forget`` erases it.

``session.call_model_input_filter`` (for ``RunConfig(call_model_input_filter=...)``) replaces
the whole history the SDK would send with what ``Memory.prepare`` chose: the summary and the
recalled memories (pins first) as system items, then the items of the window, within the hard
cap. Use it with the same session the run stores into (it stores what the run's input holds
beyond the session's items itself, so a streamed run, whose input is stored later, works too)::

    session = StratamemSession("chat-1", memory=mem, user_id="u1")
    config = RunConfig(call_model_input_filter=session.call_model_input_filter)
    result = await Runner.run(agent, "Where is my order?", session=session, run_config=config)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from agents.items import TResponseInputItem
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)
from agents.run_config import CallModelData, ModelInputData

from memory.context.assembler import AssembledContext
from memory.context.report import ContextReport
from memory.errors import InvalidHistoryError
from memory.facade import Memory
from memory.integrations.responses_items import message_items, plan_messages
from memory.integrations.windows import context_window
from storage.agent_items import AgentItems
from storage.errors import InvalidInputError
from storage.inputs import check_id

__all__ = ["StratamemSession"]

#: How often a batch is planned again when the session's open calls changed under it.
_RECORD_ATTEMPTS = 3


class StratamemSession:
    """An Agents SDK session stored in stratamem (see the module docstring).

    Every method runs its database work on a worker thread (``asyncio.to_thread``), so the
    event loop is never blocked; any number of tasks, threads and processes may use one
    session at once. A batch of ``add_items`` is stored in one transaction, all or none, in one
    place in the order (never interleaved with another batch); ``pop_item`` takes the newest
    item under the session's lock, so two pops never return the same item.

    Attributes:
        session_id: the session's id (stratamem's session of the same name, for ``user_id``).
        user_id: the user the session belongs to.
        session_settings: the SDK's settings (``limit``: how many items ``get_items`` returns
            by default).
        last_report: the report of the last context ``call_model_input_filter`` assembled.
    """

    def __init__(
        self,
        session_id: str,
        *,
        memory: Memory,
        user_id: str,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        """Bind the session to ``memory`` and a user.

        Raises:
            InvalidInputError: ``session_id`` or ``user_id`` is not a usable id.
        """
        self.session_id = check_id("session_id", session_id)
        self.user_id = check_id("user_id", user_id)
        self.session_settings = (
            coerce_session_settings(dict(session_settings))
            if isinstance(session_settings, Mapping)
            else session_settings or SessionSettings()
        )
        self.last_report: ContextReport | None = None
        self._memory = memory
        self._items = AgentItems(memory.database)
        self._lock = threading.Lock()
        self._stored_ahead: list[Any] = []

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first: all, or the newest ``limit`` (the settings'
        ``limit`` when none is given; 0 is none)."""
        wanted = resolve_session_limit(limit, self.session_settings)
        found = await asyncio.to_thread(self._items.items, self.user_id, self.session_id, wanted)
        return list(found)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store ``items`` after the session's others, in one transaction.

        Raises:
            InvalidInputError: an item is not a JSON object (a dict); nothing is stored.
            InvalidHistoryError: an item holds a value JSON has no form for (NaN, a lone
                surrogate); nothing is stored.
            storage.DatabaseUnavailableError: the database cannot be reached; nothing is stored.
        """
        batch = list(items)
        for index, item in enumerate(batch):
            if not isinstance(item, Mapping):
                raise InvalidInputError(f"item {index} is not a dict but {type(item).__name__}")
        with self._lock:
            # Items the model-input filter stored ahead of the SDK (a streamed run's input):
            # the SDK's own add_items of them stores nothing.
            ahead = self._stored_ahead
            shared = min(len(ahead), len(batch))
            if shared and batch[:shared] == ahead[:shared]:
                batch = batch[shared:]
                del ahead[:shared]
            else:
                ahead.clear()
        if batch:
            await asyncio.to_thread(self._record, batch)

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the newest item back and return it (``None`` when the session has none).

        It leaves ``get_items`` and every later model input; what stratamem already made of
        it (its message in the session's window, a summary, cards) stays until ``forget``.
        """
        popped = await asyncio.to_thread(self._items.pop, self.user_id, self.session_id)
        return popped

    async def clear_session(self) -> None:
        """Erase the session: its items and everything stratamem made of them
        (``Memory.forget`` of the session: messages, summary, jobs, its cards)."""
        await asyncio.to_thread(
            self._memory.forget, user_id=self.user_id, session_id=self.session_id
        )

    async def call_model_input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """The model input from stratamem's layers, for ``RunConfig.call_model_input_filter``.

        First the items of the SDK's input that the session lacks are stored (a streamed run
        stores its new input only after the first model call; the SDK's own ``add_items`` of
        them later is then not stored twice). The context is ``Memory.prepare`` of the
        session, with the agent's instructions as the system prompt (counted in the budget,
        still sent as instructions): the summary and the memories as system items, then the
        items of the messages the window kept (a tool result the cap cut carries the cut
        output). ``last_report`` says what was dropped.

        Raises:
            ConfigurationError: the session holds messages that another writer stored in the
                middle of the window.
            ContextOverflowError: the instructions and current turn do not fit the budget.
        """
        model_data = data.model_data
        instructions = model_data.instructions
        await asyncio.to_thread(self._store_missing, list(model_data.input))
        context = await asyncio.to_thread(
            self._memory.prepare,
            user_id=self.user_id,
            session_id=self.session_id,
            input=None,
            system=instructions,
        )
        built = await asyncio.to_thread(self._model_input, context, instructions is not None)
        self.last_report = context.report
        return ModelInputData(input=built, instructions=instructions)

    def _store_missing(self, given: list[Any]) -> None:
        """Store the items at the end of ``given`` that the session does not hold yet (the
        session's newest items are ``given``'s first ones, as the SDK reads its history)."""
        stored = self._items.items(self.user_id, self.session_id, len(given))
        held = next(
            size
            for size in range(min(len(given), len(stored)), -1, -1)
            if given[:size] == stored[len(stored) - size :]
        )
        missing = given[held:]
        if missing:
            self._record(missing)
            with self._lock:
                self._stored_ahead.extend(missing)

    def _record(self, batch: Sequence[Mapping[str, Any]]) -> None:
        """Store one batch as messages, planned against the session's open calls (planned
        again when a batch of another task changed them in between)."""
        for attempt in range(_RECORD_ATTEMPTS):
            calls = self._memory.open_calls(user_id=self.user_id, session_id=self.session_id)
            messages = plan_messages(batch, [call.call_id for call in calls])
            try:
                self._memory.record(
                    user_id=self.user_id, session_id=self.session_id, messages=messages
                )
                return
            except InvalidHistoryError:
                if attempt == _RECORD_ATTEMPTS - 1:
                    raise

    def _model_input(self, context: AssembledContext, has_system: bool) -> list[Any]:
        """The items of an assembled context: its summary and memories, then its window."""
        split = context_window(self._items, self.user_id, self.session_id, context)
        built: list[Any] = [
            {"role": "system", "content": m["content"]}
            for m in split.head[1 if has_system else 0 :]
        ]
        for message, sent in split.window:
            cut = sent["content"] if message.seq in split.cut else None
            built.extend(message_items(message, cut))
        return built
