"""``stratamem inspect --user U --session S``: a stored session and what its next request holds."""

from __future__ import annotations

import argparse

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from memory.cli.base import EXIT_OK, CommandError
from memory.cli.views import cards_table, report_view, summary_view
from memory.context.cut import preview
from memory.context.messages import Message
from memory.errors import InvalidHistoryError
from memory.facade import Memory
from memory.longterm.long_term_memory import default_embedder
from memory.settings import Settings
from storage import CardFilter, CardStore, Database, StoredMessage

__all__ = ["show_session"]

#: Newest messages listed by default; the rest are counted.
DEFAULT_MESSAGES = 30


def show_session(args: argparse.Namespace, out: Console) -> int:
    """Show a stored session: messages, summary and boundary, cards, pins, the next request.

    The next request is assembled exactly as ``prepare(input=None)`` would assemble it, so
    like that request it may queue the summary job the session is due for, and archive raw
    what the cap would otherwise drop (nothing stored is ever deleted by either).
    """
    user, session = args.user, args.session
    if not user or not session:
        raise CommandError("inspect a stored session with both --user and --session")
    settings = Settings()
    database = Database.open(settings.database_url, data_dir=settings.data_dir)
    try:
        mem = Memory(database, settings)
    except BaseException:
        database.close()
        raise
    with mem:
        history = mem.history(user_id=user, session_id=session)
        summary = mem.summary(user_id=user, session_id=session)
        tokens = sum(stored.tokens for stored in history)
        out.print(
            f"[bold]session {escape(session)!r} of user {escape(user)!r}[/]: "
            f"{len(history):,} message(s), {tokens:,} tokens stored",
            highlight=False,
            soft_wrap=True,
        )
        if not history:
            out.print("Nothing is stored for this session.", highlight=False)
            return EXIT_OK
        boundary = summary.boundary_seq if summary else 0
        out.print(_messages_table(history, boundary, args.messages, out.width))
        out.print(summary_view(summary))
        if settings.cards.enabled:
            embedder = default_embedder(settings.cards)
            store = CardStore(database, model=embedder.name, dimension=embedder.dimension)
            cards = store.list_cards(user, CardFilter(session_id=session, include_superseded=True))
            out.print(cards_table(cards, f"Cards from this session ({len(cards)})"))
            pins = mem.pins(user_id=user)
            out.print(cards_table(pins, f"Pins of the user ({len(pins)}), always sent first"))
        else:
            out.print("Long-term memory is off (cards.enabled=False): no cards, no pins.")
        try:
            context = mem.prepare(user_id=user, session_id=session, system=args.system)
        except InvalidHistoryError as error:
            out.print(
                f"Next request: none can be assembled yet: {escape(str(error))}",
                highlight=False,
                soft_wrap=True,
            )
            return EXIT_OK
        out.print(report_view(context.report))
    return EXIT_OK


def _messages_table(history: list[StoredMessage], boundary: int, limit: int, width: int) -> Table:
    shown = history[-limit:] if limit else []
    hidden = len(history) - len(shown)
    title = "Messages" + (
        f" (the newest {len(shown)}; {hidden:,} older not shown)" if hidden else ""
    )
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("seq", "role", "tokens", "where", "content"):
        table.add_column(name, justify="right" if name in ("seq", "tokens") else "left")
    room = max(20, width - 40)
    for stored in shown:
        where = "summarised" if stored.seq <= boundary else "window"
        table.add_row(
            str(stored.seq),
            stored.role,
            f"{stored.tokens:,}",
            where,
            escape(preview(_text(stored), room)),
        )
    return table


def _text(stored: StoredMessage) -> str:
    message = Message.from_openai(stored.payload)
    if message.tool_calls:
        calls = ", ".join(f"{call.function.name}()" for call in message.tool_calls)
        return f"{message.text} [{calls}]" if message.text else calls
    return message.text
