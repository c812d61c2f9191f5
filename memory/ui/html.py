"""HTML built in Python, escaped by default: stored text is never markup.

``Html`` is a string known to be safe markup; everything else that reaches ``el`` or ``join``
is text and is escaped (``&``, ``<``, ``>``, quotes). Only this module makes ``Html`` from
strings, and only from its own tags or escaped text, so a page can hold a stored ``<script>``
only as text. URLs are built by ``url``: a path of ours with its query encoded, never a
stored string as is (no ``javascript:`` link can come from data).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from urllib.parse import urlencode

__all__ = ["Html", "Part", "el", "join", "text", "url", "void"]


class Html(str):
    """Markup that is safe to send as is (built by this module)."""

    __slots__ = ()


#: What a page is built of: markup, text (escaped), numbers, nothing, or a list of these.
Part = Html | str | int | float | None | Iterable["Part"]

AttributeValue = str | int | float | bool | None


def text(value: object) -> Html:
    """``value`` as text: escaped, quotes included."""
    if isinstance(value, Html):
        return value
    return Html(html.escape(str(value), quote=True))


def join(*parts: Part) -> Html:
    """The parts one after the other, each escaped unless it is ``Html``."""
    return Html("".join(_render(part) for part in parts))


def el(tag: str, *children: Part, **attributes: AttributeValue) -> Html:
    """An element: ``el("a", "home", href="/")``; ``class_`` is ``class``, ``data_x``
    ``data-x``; ``True`` is a bare attribute, ``False`` and ``None`` leave it out."""
    return Html(f"<{tag}{_attributes(attributes)}>{join(*children)}</{tag}>")


def void(tag: str, **attributes: AttributeValue) -> Html:
    """An element without content or end tag (``input``, ``br``, ``meta``)."""
    return Html(f"<{tag}{_attributes(attributes)}>")


def url(path: str, query: Mapping[str, object | None] | None = None) -> str:
    """One of the page's own paths with its query encoded (``None`` values left out).

    Raises:
        ValueError: ``path`` is not one of ours (absolute, starting with one ``/``).
    """
    if not path.startswith("/") or path.startswith("//"):
        raise ValueError(f"not a path of this page: {path!r}")
    pairs = [(name, str(value)) for name, value in (query or {}).items() if value is not None]
    return f"{path}?{urlencode(pairs)}" if pairs else path


def _render(part: Part) -> str:
    if part is None:
        return ""
    if isinstance(part, str):
        return part if isinstance(part, Html) else html.escape(part, quote=True)
    if isinstance(part, bool):
        return html.escape(str(part))
    if isinstance(part, int | float):
        return html.escape(str(part))
    return "".join(_render(item) for item in part)


def _attributes(attributes: Mapping[str, AttributeValue]) -> str:
    rendered: list[str] = []
    for name, value in attributes.items():
        if value is None or value is False:
            continue
        name = name.rstrip("_").replace("_", "-")
        if value is True:
            rendered.append(f" {name}")
        else:
            rendered.append(f' {name}="{html.escape(str(value), quote=True)}"')
    return "".join(rendered)
