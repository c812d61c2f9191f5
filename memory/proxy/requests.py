"""What the proxy reads from a client's request, and the OpenAI-shaped errors it answers with.

The body is read within a size limit (``ProxyConfig.max_body_bytes``): a declared
``Content-Length`` over it is refused before a byte is read, and a body sent in chunks is
refused as soon as it passes it, so a huge body costs neither memory nor CPU. Every refusal
here is a 4xx with the error object of the OpenAI API, so that the ``openai`` client raises
its usual exception (``BadRequestError``, ``AuthenticationError``, ...).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memory.proxy.config import SESSION_HEADER, USER_HEADER
from storage import InvalidInputError
from storage.inputs import check_id

__all__ = [
    "BodyRefused",
    "client_error",
    "json_object",
    "named_user",
    "read_body",
    "refuse_ids",
    "to_json",
]


class BodyRefused(Exception):
    """The request's body cannot be used; ``response`` is the 4xx the client gets."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


def client_error(status: int, detail: str, code: str) -> Response:
    """An error of the client's request, in the OpenAI error shape."""
    error = {"message": f"stratamem proxy: {detail}", "type": "invalid_request_error", "code": code}
    return JSONResponse({"error": error}, status_code=status)


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, when it has at most ``limit`` bytes.

    Raises:
        BodyRefused: a 413 when the body is larger (declared or sent), before more is read.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyRefused(_too_large(limit))
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyRefused(_too_large(limit))
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> Response:
    return client_error(
        413,
        f"the request body is larger than {limit:,} bytes (the proxy's --max-body-bytes)",
        "request_too_large",
    )


def json_object(raw: bytes) -> dict[str, Any] | None:
    """The request body as a JSON object, or ``None`` (then it is forwarded untouched).

    Raises:
        BodyRefused: a 400 when the JSON is nested too deeply for Python's parser: nobody can
            tell who the request is for, so it is not forwarded either.
    """
    try:
        body = json.loads(raw)
    except RecursionError:
        raise BodyRefused(_too_deep()) from None
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def to_json(body: dict[str, Any]) -> bytes:
    """The body to send upstream, as JSON.

    Raises:
        BodyRefused: a 400 when a field is nested too deeply to write back.
    """
    try:
        return json.dumps(body).encode()
    except RecursionError:
        raise BodyRefused(_too_deep()) from None


def _too_deep() -> Response:
    return client_error(400, "the request body is nested too deeply to read", "nested_too_deeply")


def named_user(request: Request, body: dict[str, Any] | None) -> str | None:
    """The user a request names: the header, else the body's ``user``; ``None`` for nobody."""
    header = request.headers.get(USER_HEADER)
    if header:
        return header
    user = body.get("user") if body is not None else None
    return user if isinstance(user, str) and user else None


def refuse_ids(user: str, session: str, request: Request) -> Response | None:
    """A 400 when the user or session id cannot name stored rows (too long, NUL, ...).

    Checked before anything is stored or forwarded: such a request is the client's mistake,
    not a failure of memory, and the answer says which id is wrong without quoting it.
    """
    where = f"the {USER_HEADER} header" if request.headers.get(USER_HEADER) else "the body's user"
    for name, value, code in (
        (where, user, "invalid_user"),
        (f"the {SESSION_HEADER} header", session, "invalid_session"),
    ):
        try:
            check_id(name, value)
        except InvalidInputError as error:
            return client_error(400, str(error), code)
    return None
