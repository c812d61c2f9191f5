"""The memory proxy: an OpenAI-compatible server that puts stratamem in front of an upstream.

``POST /v1/chat/completions`` with a user (the ``X-Stratamem-User`` header or the body's
``user``) stores the request's new messages, sends the assembled context instead of the
client's history, returns the upstream's answer unchanged, streamed or not, and stores the
reply once the answer has gone out (``memory.proxy.recordings``); with
``X-Stratamem-End-Session: 1`` it then ends the session (``Memory.end_session``). While it
serves, a worker thread runs the jobs that make cards of what was stored and fold summaries
(``ProxyConfig.worker``). ``GET /v1/models`` is
forwarded; ``GET /healthz`` answers without touching anything. Every ``/v1`` request needs a
stratamem key unless the proxy runs with ``--no-auth``; the key decides which user a request
may act as (``memory.proxy.access``).

``Memory`` is synchronous: its calls run in the thread pool, never on the event loop.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from memory.context.assembler import AssembledContext
from memory.errors import ConfigurationError, ContextOverflowError
from memory.facade import Memory
from memory.hook import DEFAULT_SESSION, context_for, record_reply
from memory.proxy.access import Access, Refused
from memory.proxy.config import END_SESSION_HEADER, MEMORY_HEADER, SESSION_HEADER, ProxyConfig
from memory.proxy.keys import KeyRing
from memory.proxy.mending import Mender
from memory.proxy.recordings import Recordings
from memory.proxy.requests import (
    BodyRefused,
    client_error,
    json_object,
    named_user,
    read_body,
    refuse_ids,
    to_json,
)
from memory.proxy.stream import DONE, EventSplitter, ReplyAssembler, event_data
from memory.proxy.upstream import Upstream, UpstreamFailed, response_headers
from storage import SessionErasedError
from storage.proxy_keys import ProxyKeyStore

__all__ = ["MemoryProxy", "create_app"]

logger = logging.getLogger(__name__)

#: Records a reply, or starts recording it (``ProxyConfig.record_after_answer``).
Recorder = Callable[[dict[str, Any]], Awaitable[None]]


def create_app(
    memory: Memory,
    config: ProxyConfig,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Starlette:
    """The ASGI application of a proxy over ``memory`` (which the caller opens and closes).

    Args:
        memory: where messages are stored and contexts assembled, and keys are found.
        config: the upstream, its key, whether requests need stratamem keys.
        transport: an ``httpx`` transport for the upstream instead of the network (tests).
    """
    return MemoryProxy(memory, config, transport=transport).app


class MemoryProxy:
    """The proxy's state and handlers; ``app`` is the ASGI application.

    Attributes:
        memory_failures: requests answered without memory, and replies not recorded, because
            storing or assembling failed or a streamed reply could not be read back; each is
            logged as a warning.
        recordings: the replies being stored after their response went out.
    """

    def __init__(
        self,
        memory: Memory,
        config: ProxyConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.memory = memory
        self.config = config
        self.memory_failures = 0
        self.recordings = Recordings()
        keys = KeyRing(ProxyKeyStore(memory.database)) if config.require_keys else None
        self._access = Access(keys)
        self._mender = Mender(memory.counter, memory.budget.history)
        self._upstream = Upstream(config, transport=transport)
        self.app = Starlette(
            routes=[
                Route("/healthz", self.healthz, methods=["GET"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            ],
            lifespan=self._lifespan,
        )

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self._upstream.start()
        stop = threading.Event()
        if self.config.worker:
            # Stopped with the server; ``Memory.close`` waits for the job it is running.
            self.memory.run_worker(stop=stop)
        try:
            yield
        finally:
            # uvicorn has finished the requests in flight; their replies are stored before the
            # process may end.
            await self.recordings.drain()
            stop.set()
            await self._upstream.close()

    async def healthz(self, request: Request) -> Response:
        """Liveness: the process answers (the database and upstream are not asked; no key).

        It names no user and no key: only counts.
        """
        return JSONResponse({"status": "ok", "memory_failures": self.memory_failures})

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``, forwarded as is (for any valid key)."""
        if isinstance(caller := await self._access.caller(request), Refused):
            return caller.response
        try:
            answer = await self._upstream.send("GET", "/models", request.headers, stream=False)
        except UpstreamFailed as failed:
            return failed.response
        return Response(answer.content, answer.status_code, headers=response_headers(answer, {}))

    async def chat_completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions`` with memory when the request acts as a user."""
        if isinstance(caller := await self._access.caller(request), Refused):
            return caller.response
        try:
            raw = await read_body(request, self.config.max_body_bytes)
            body = json_object(raw)
        except BodyRefused as refused:
            return refused.response
        user = self._access.acting_user(caller, named_user(request, body))
        if isinstance(user, Refused):
            return user.response
        streamed = body is not None and body.get("stream") is True
        if body is None or user is None or not isinstance(body.get("messages"), list):
            return await self._forward(request, raw, streamed, None, {})  # untouched
        session = request.headers.get(SESSION_HEADER) or DEFAULT_SESSION
        if (wrong_id := refuse_ids(user, session, request)) is not None:
            return wrong_id
        # The replies this proxy answered before on this session are stored first, so that a
        # client sending one back finds it stored (and it is not stored twice).
        await self.recordings.settled((user, session))
        context = await self._context(body["messages"], raw, user, session)
        if isinstance(context, Response):
            return context
        sent = context.messages if context is not None else None
        try:
            content = raw if sent is None else to_json({**body, "messages": sent})
        except BodyRefused as too_deep:
            return too_deep.response
        state = {MEMORY_HEADER: "ok" if sent is not None else "degraded"}
        ends = request.headers.get(END_SESSION_HEADER, "").strip().lower() in ("1", "true")

        async def record(reply: dict[str, Any]) -> None:
            recording = self._record(reply, user, session, context, ends)
            if self.config.record_after_answer:
                self.recordings.start((user, session), recording)
            else:
                await recording

        # Without its input stored, the reply is not recorded either: the client's next
        # request resends both, in their order.
        return await self._forward(
            request, content, streamed, record if sent is not None else None, state
        )

    async def _context(
        self, messages: list[Any], raw: bytes, user: str, session: str
    ) -> AssembledContext | Response | None:
        """The assembled context to send; a 400 when the request's input cannot fit the
        window; ``None`` when memory failed (then logged).

        What memory would refuse in the messages is repaired first (``memory.proxy.mending``).
        A documented degradation point: whatever else fails while storing the new messages or
        assembling (database down, a history the session cannot take) is logged and counted,
        and the client's own messages go to the upstream: memory never blocks a request.
        """

        def assemble() -> AssembledContext:
            mended, changed = self._mender.mend(messages, raw)
            if changed:
                logger.info(
                    "stratamem proxy: %d message(s) of user %r, session %r repaired to be stored",
                    changed,
                    user,
                    session,
                )
            return context_for(
                self.memory, mended, user_id=user, session_id=session, lookback=self.config.lookback
            )

        try:
            return await run_in_threadpool(assemble)
        except ContextOverflowError as error:
            # The request's own input (with the system message) cannot fit the window: the
            # upstream could not take it either. The message names numbers, never content.
            return client_error(400, str(error), "context_length_exceeded")
        except Exception as error:  # noqa: BLE001 - a degradation point: see the docstring
            self._failed("assembling the context", user, session, error)
            return None

    async def _record(
        self,
        reply: dict[str, Any],
        user: str,
        session: str,
        context: AssembledContext | None,
        ends: bool = False,
    ) -> None:
        """Store the model's reply, then end the session if asked; a failure is logged and
        counted, never raised.

        It runs after the client has its answer; the client holds the reply and sends it back
        with its next request, where it is stored as a new message: nothing is lost. A reply to
        a session erased since its context was assembled is not stored (``reply_to``). The
        session is ended (``ends``) only once its reply is stored: a request whose reply is not
        stored ends nothing, and the client's next request with the header ends it.
        """
        try:
            await run_in_threadpool(
                record_reply,
                self.memory,
                self._mender.reply(reply),
                user_id=user,
                session_id=session,
                context=context,
            )
        except SessionErasedError:
            logger.info(
                "user %r, session %r: erased while answering; reply not stored", user, session
            )
            return
        except Exception as error:  # noqa: BLE001 - a degradation point, as in _context
            self._failed("recording the reply", user, session, error)
            return
        if ends:
            await self._end(user, session)

    async def _end(self, user: str, session: str) -> None:
        """End the session: its messages not archived yet become cards (a queued job in
        background mode). A failure is logged and counted, never raised."""
        try:
            await run_in_threadpool(self.memory.end_session, user_id=user, session_id=session)
        except ConfigurationError:
            logger.info(
                "user %r, session %r: long-term memory is off; nothing ended", user, session
            )
        except SessionErasedError:
            logger.info("user %r, session %r: erased meanwhile; nothing ended", user, session)
        except Exception as error:  # noqa: BLE001 - a degradation point, as in _context
            self._failed("ending the session", user, session, error)

    def _failed(self, doing: str, user: str, session: str, error: Exception) -> None:
        self.memory_failures += 1
        # Errors of stratamem and storage never quote message content; a traceback might (a
        # chained pydantic error shows its input), so it goes to debug level only.
        logger.warning(
            "memory degraded while %s for user %r, session %r: %s: %s",
            doing,
            user,
            session,
            type(error).__name__,
            error,
        )
        logger.debug("memory failure", exc_info=error)

    async def _forward(
        self,
        request: Request,
        content: bytes,
        streamed: bool,
        record: Recorder | None,
        state: dict[str, str],
    ) -> Response:
        """Send to the upstream and answer with its response; ``record`` takes the reply."""
        try:
            answer = await self._upstream.send(
                "POST", "/chat/completions", request.headers, content, stream=streamed
            )
        except UpstreamFailed as failed:
            failed.response.headers.update(state)
            return failed.response
        if streamed and answer.status_code < 400:
            events = _pass_through(answer) if record is None else self._relay(answer, record)
            headers = response_headers(answer, state)
            return StreamingResponse(events, answer.status_code, headers=headers)
        if streamed:
            await answer.aread()
            await answer.aclose()
        if record is not None and answer.status_code == 200:
            reply = _first_message(answer.content)
            if reply is not None:
                await record(reply)
        return Response(answer.content, answer.status_code, headers=response_headers(answer, state))

    async def _relay(self, answer: httpx.Response, record: Recorder) -> AsyncIterator[bytes]:
        """The upstream's events as they complete; ``record`` takes the reply before ``[DONE]``.

        Holding back only the final event means a client that sends its next request as soon
        as the stream ends finds this reply's recording started, and so waits for it
        (``Recordings``), or, with ``record_after_answer`` off, finds it stored.
        A stream cut short (no ``finish_reason``) is not recorded: the client does not hold
        that reply either. Nor is a reply whose chunks could not be read back (a shape the
        assembler does not know): that is logged and counted, and every byte goes to the
        client as it came; the client's next request brings the reply in.
        """
        splitter, assembler = EventSplitter(), ReplyAssembler()
        held: list[bytes] = []
        try:
            async for data in answer.aiter_bytes():
                for event in splitter.feed(data):
                    payload = event_data(event)
                    if payload == DONE or held:
                        held.append(event)
                        continue
                    if payload is not None:
                        assembler.add(payload)
                    yield event
            held.append(splitter.rest())
            if assembler.unreadable is not None:
                self.memory_failures += 1
                logger.warning(
                    "stratamem proxy: a streamed reply could not be read back (%s); it is not "
                    "stored, the client's next request brings it in",
                    assembler.unreadable,
                )
            reply = assembler.message() if assembler.finished else None
            if reply is not None:
                await record(reply)
            for event in held:
                if event:
                    yield event
        except httpx.HTTPError as error:
            logger.warning("stratamem proxy: the upstream's stream broke: %r", error)
            raise
        finally:
            await answer.aclose()


async def _pass_through(answer: httpx.Response) -> AsyncIterator[bytes]:
    """The upstream's stream of a request without memory, its bytes forwarded as they come."""
    try:
        async for data in answer.aiter_bytes():
            yield data
    except httpx.HTTPError as error:
        logger.warning("stratamem proxy: the upstream's stream broke: %r", error)
        raise
    finally:
        await answer.aclose()


def _first_message(content: bytes) -> dict[str, Any] | None:
    """The first choice's message of a chat completion, or ``None`` when there is none."""
    try:
        completion = json.loads(content)
        message = completion["choices"][0]["message"]
    except (ValueError, LookupError, TypeError, RecursionError):
        return None
    return message if isinstance(message, dict) else None
