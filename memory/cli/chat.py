"""``stratamem chat``: talk to any OpenAI-compatible model, with stratamem as its memory.

The loop reads lines from a stream and writes to a rich ``Console``, so it runs the same on a
terminal and in a test (``Chat.run``). Each line is a message (stored by ``prepare``, answered
by the model with the reply streamed as it arrives, the reply recorded) or a slash command.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import uuid
from dataclasses import dataclass
from typing import TextIO, cast

import openai
from openai.types.chat import ChatCompletionMessageParam
from rich.console import Console
from rich.markup import escape

from memory.cli.base import CommandError, Subcommands
from memory.cli.endpoint import (
    describe_api_error,
    endpoint_name,
    open_client,
)
from memory.cli.forget import ask_to_confirm
from memory.cli.views import cards_table, report_view, search_table, summary_view
from memory.context.report import ContextReport
from memory.errors import ConfigurationError, StratamemError
from memory.facade import Memory
from memory.settings import Settings
from storage import StorageError

__all__ = ["Chat", "ChatOptions", "register_chat"]

#: Exit code when the model cannot be reached at all (the chat cannot start).
EXIT_UNREACHABLE = 3
#: Seconds the first look at the endpoint waits: long enough for a busy server to answer.
PROBE_TIMEOUT_S = 10.0

DEFAULT_SYSTEM = "You are a helpful assistant. Use the memories you are given when they help."

HELP = """\
/report        what the last request contained (tokens per layer, drops, recalled cards)
/summary       the session's rolling summary and its boundary
/search QUERY  search the user's cards
/pin TEXT      pin a fact: always in the prompt
/unpin ID      unpin card ID
/pins          the user's pins
/forget        delete this session for real (/forget all: everything of the user)
/new           start a new session (earlier sessions are still recalled)
/help          this list
/quit          leave (end of input does too)"""


@dataclass(frozen=True, slots=True)
class ChatOptions:
    """Who is chatting, in which session, with which model.

    Attributes:
        user: the user id every session and card belongs to.
        session: the session id to start in.
        model: the model name sent to the endpoint.
        system: the system prompt of every request.
        endpoint: the endpoint's name, for messages.
    """

    user: str
    session: str
    model: str
    system: str
    endpoint: str


def register_chat(subcommands: Subcommands) -> None:
    """Add ``stratamem chat``: an interactive chat with memory."""
    chat = subcommands.add_parser(
        "chat",
        help="chat with an OpenAI-compatible model, with memory (OPENAI_BASE_URL, OPENAI_API_KEY)",
        description="Chat with any OpenAI-compatible model (OPENAI_BASE_URL, OPENAI_API_KEY) "
        "with stratamem as its memory: every message is stored, each request is assembled "
        "from the window, the summary and the recalled cards, and the reply is streamed. "
        "Type /help for the slash commands.",
    )
    chat.add_argument("--user", default="me", help="your user id (default: me)")
    chat.add_argument("--session", default="chat", help="the session to talk in (default: chat)")
    chat.add_argument("--model", help="the model name (default: STRATAMEM_MODEL or gpt-4o-mini)")
    chat.add_argument("--system", default=DEFAULT_SYSTEM, help="the system prompt")
    chat.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the model (default 60)"
    )
    chat.set_defaults(handler=_run_chat)


def _run_chat(args: argparse.Namespace, out: Console) -> int:
    overrides = {"model": args.model} if args.model else {}
    settings = Settings(**overrides)
    if not settings.llm_configured:
        raise CommandError(
            "no model is configured: set OPENAI_BASE_URL (and OPENAI_API_KEY if the server "
            "needs one)"
        )
    where = endpoint_name(settings)
    client = open_client(settings, timeout=args.timeout)
    try:
        _check_reachable(client, where)
        with Memory.open(**overrides) as mem:
            # Summaries and cards are written in the background of this process.
            mem.run_worker()
            options = ChatOptions(args.user, args.session, settings.model, args.system, where)
            return Chat(mem, client, options, out).run(sys.stdin)
    finally:
        client.close()


def _check_reachable(client: openai.OpenAI, where: str) -> None:
    """Fail at once, in one line, when nothing answers at the endpoint.

    Any HTTP answer counts as reachable: many compatible servers have no ``GET /models``.
    """
    try:
        client.with_options(timeout=PROBE_TIMEOUT_S).models.list()
    except (openai.APIConnectionError, openai.AuthenticationError) as error:
        raise CommandError(describe_api_error(error, where), EXIT_UNREACHABLE) from error
    except openai.APIStatusError:
        pass


class Chat:
    """One chat: a user, the current session, the last request's report."""

    def __init__(
        self, mem: Memory, client: openai.OpenAI, options: ChatOptions, out: Console
    ) -> None:
        self._mem = mem
        self._client = client
        self._options = options
        self._out = out
        self.user = options.user
        self.session = options.session
        #: The report of the last request sent, for ``/report``.
        self.last_report: ContextReport | None = None

    def run(self, lines: TextIO) -> int:
        """Read lines until ``/quit`` or the end of input; return the exit code (0)."""
        self._say(
            f"stratamem chat: {self._options.model} at {self._options.endpoint}, "
            f"user {self.user!r}, session {self.session!r}. /help lists the commands."
        )
        while True:
            line = self._read(lines, "you> ")
            if line is None:
                return 0
            text = line.strip()
            if not text:
                continue
            if text.startswith("/"):
                if not self._command(text, lines):
                    return 0
                continue
            try:
                self.ask(text)
            except (StratamemError, StorageError) as error:
                # A message too long for the window, a database outage: say it, go on.
                self._error(str(error))
            except KeyboardInterrupt:
                self._out.print()
                self._say("(interrupted: the reply was not kept; your message is stored)")

    def ask(self, text: str) -> str | None:
        """Send one message and stream the reply; the recorded reply, or ``None`` on failure.

        The message is stored before the model is asked, so a failure loses nothing typed;
        a reply is recorded only when it arrived whole.
        """
        context = self._mem.prepare(
            user_id=self.user, session_id=self.session, input=text, system=self._options.system
        )
        self.last_report = context.report
        parts: list[str] = []
        self._out.print("[bold]assistant>[/] ", end="")
        try:
            stream = self._client.chat.completions.create(
                model=self._options.model,
                # Validated OpenAI-format dicts: what the API's typed dicts describe.
                messages=cast("list[ChatCompletionMessageParam]", context.messages),
                stream=True,
            )
            for chunk in stream:
                delta = chunk.choices[0].delta.content if chunk.choices else None
                if delta:
                    parts.append(delta)
                    self._out.print(delta, end="", markup=False, highlight=False)
        except openai.OpenAIError as error:
            self._out.print()
            cut = " (the reply was cut off, so it is not kept)" if parts else ""
            self._error(
                f"{describe_api_error(error, self._options.endpoint)}{cut}; your message is "
                "stored and the next one goes on from it"
            )
            return None
        self._out.print()
        reply = "".join(parts)
        if not reply:
            self._error("the model sent an empty reply; nothing was recorded")
            return None
        self._mem.record(
            user_id=self.user,
            session_id=self.session,
            messages=[{"role": "assistant", "content": reply}],
            reply_to=context,
        )
        return reply

    # --- slash commands ---------------------------------------------------------------------

    def _command(self, text: str, lines: TextIO) -> bool:
        """Run one slash command; ``False`` means leave."""
        name, _, argument = text.partition(" ")
        argument = argument.strip()
        if name in ("/quit", "/exit"):
            return False
        try:
            self._dispatch(name, argument, lines)
        except (StratamemError, StorageError, ValueError) as error:
            self._error(str(error))
        return True

    def _dispatch(self, name: str, argument: str, lines: TextIO) -> None:
        mem, user, out = self._mem, self.user, self._out
        if name == "/help":
            out.print(HELP, markup=False, highlight=False)
        elif name == "/report":
            if self.last_report is None:
                self._say("No request was sent yet in this chat.")
            else:
                out.print(report_view(self.last_report, "Last request"))
        elif name == "/summary":
            out.print(summary_view(mem.summary(user_id=user, session_id=self.session)))
        elif name == "/search":
            if not argument:
                raise ValueError("/search needs a query: /search QUERY")
            hits = mem.search(user_id=user, query=argument, k=8, include_superseded=True)
            out.print(search_table(hits, argument) if hits else "No card matches.")
        elif name == "/pin":
            if not argument:
                raise ValueError("/pin needs the text to pin: /pin TEXT")
            card = mem.pin(user_id=user, text=argument, session_id=self.session)
            self._say(f"Pinned as card #{card.id}: always in the prompt from now on.")
        elif name == "/unpin":
            card = mem.unpin(user_id=user, card_id=_card_id(argument))
            self._say(f"Unpinned card #{card.id}; it stays as an ordinary card.")
        elif name == "/pins":
            pins = mem.pins(user_id=user)
            out.print(cards_table(pins, f"Pins ({len(pins)})") if pins else "No pins.")
        elif name == "/forget":
            self._forget(argument, lines)
        elif name == "/new":
            self._new_session()
        else:
            raise ValueError(f"unknown command {name}: /help lists the commands")

    def _forget(self, argument: str, lines: TextIO) -> None:
        if argument not in ("", "all"):
            raise ValueError("/forget deletes this session; /forget all deletes everything")
        everything = argument == "all"
        target = f"everything of user {self.user!r}" if everything else f"session {self.session!r}"
        if not ask_to_confirm(f"Forget {target}? This cannot be undone.", lines, self._out):
            self._say("Nothing was deleted.")
            return
        gone = self._mem.forget(user_id=self.user, session_id=None if everything else self.session)
        self.last_report = None
        self._say(f"Forgot {target}: {gone.describe()}.")

    def _new_session(self) -> None:
        """Archive the current session as cards and go on in a fresh one."""
        ended = self.session
        # Long-term memory off: nothing to archive, and nothing will be recalled.
        with contextlib.suppress(ConfigurationError):
            self._mem.end_session(user_id=self.user, session_id=ended)
        self.session = f"{self._options.session}-{uuid.uuid4().hex[:8]}"
        self.last_report = None
        self._say(
            f"New session {self.session!r}; session {ended!r} is archived as cards and its "
            "memories are recalled when they match."
        )

    # --- input and output -------------------------------------------------------------------

    def _read(self, lines: TextIO, prompt: str) -> str | None:
        """The next line, or ``None`` at the end of input; a terminal gets line editing."""
        if lines is sys.stdin and lines.isatty():
            try:
                return self._out.input(prompt)
            except (EOFError, KeyboardInterrupt):  # Ctrl-D or Ctrl-C at the prompt: leave
                self._out.print()
                return None
        self._out.print(prompt, end="", markup=False, highlight=False)
        line = lines.readline()
        if not line:
            self._out.print()
            return None
        return line

    def _say(self, text: str) -> None:
        self._out.print(escape(text), highlight=False, soft_wrap=True)

    def _error(self, text: str) -> None:
        self._out.print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)


def _card_id(argument: str) -> int:
    try:
        return int(argument.lstrip("#"))
    except ValueError:
        raise ValueError(f"/unpin needs a card number, not {argument!r}") from None
