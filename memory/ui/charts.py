"""Charts as inline SVG: tokens per layer, one stacked bar per request, the budget as a line.

No script draws them: each bar is a handful of ``rect`` elements with a ``title`` (the
browser's own tooltip), coloured by class (``.l-<layer>`` in the style sheet).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memory.ui.html import Html, el
from memory.ui.style import LAYER_COLOURS

__all__ = ["LAYERS", "layer_bar", "legend", "request_chart"]

#: The layers of a request, bottom to top, as the report names them.
LAYERS = tuple(LAYER_COLOURS)

_HEIGHT = 160
_BAR = 8
_GAP = 2
_SLOTS = 100


def request_chart(rows: Sequence[Mapping[str, int]], *, caption: str) -> Html:
    """One stacked bar per request (oldest left), with the budget as a dashed line.

    Args:
        rows: per request, tokens by layer name (``LAYERS``), ``budget`` and ``id``.
        caption: what the chart shows, for readers of the SVG (its ``title``).
    """
    if not rows:
        return Html("")
    top = max(max(row["budget"], sum(row[layer] for layer in LAYERS)) for row in rows) or 1
    # A few requests keep their bars narrow: the chart is at least _SLOTS bars wide.
    width = max(len(rows), _SLOTS) * (_BAR + _GAP) + _GAP
    scale = (_HEIGHT - 10) / top
    bars: list[Html] = []
    for position, row in enumerate(rows):
        x = _GAP + position * (_BAR + _GAP)
        y = float(_HEIGHT)
        total = sum(row[layer] for layer in LAYERS)
        for layer in LAYERS:
            height = row[layer] * scale
            if height <= 0:
                continue
            y -= height
            bars.append(
                el(
                    "rect",
                    el(
                        "title",
                        f"request {row['id']}: {layer} {row[layer]:,} tokens "
                        f"({total:,} of {row['budget']:,})",
                    ),
                    x=x,
                    y=f"{y:.1f}",
                    width=_BAR,
                    height=f"{height:.1f}",
                    class_=f"l-{layer}",
                    data_layer=layer,
                )
            )
    budget_path = _budget_path(rows, scale)
    return el(
        "svg",
        el("title", caption),
        bars,
        el("path", d=budget_path, class_="budget"),
        class_="chart",
        viewBox=f"0 0 {width} {_HEIGHT}",
        preserveAspectRatio="none",
        role="img",
        aria_label=caption,
        xmlns="http://www.w3.org/2000/svg",
    )


def layer_bar(tokens: Mapping[str, int], budget: int) -> Html:
    """One request's layers as a horizontal stacked bar against its budget."""
    top = max(budget, sum(tokens.get(layer, 0) for layer in LAYERS)) or 1
    x = 0.0
    parts: list[Html] = []
    for layer in LAYERS:
        share = 1000 * tokens.get(layer, 0) / top
        if share <= 0:
            continue
        parts.append(
            el(
                "rect",
                el("title", f"{layer}: {tokens.get(layer, 0):,} tokens"),
                x=f"{x:.1f}",
                y=0,
                width=f"{share:.1f}",
                height=14,
                class_=f"l-{layer}",
            )
        )
        x += share
    budget_x = 1000 * budget / top
    return el(
        "svg",
        parts,
        el("path", d=f"M{budget_x:.1f} 0 V14", class_="budget"),
        class_="bar",
        viewBox="0 0 1000 14",
        preserveAspectRatio="none",
        role="img",
        aria_label="tokens per layer against the budget",
        xmlns="http://www.w3.org/2000/svg",
    )


def legend() -> Html:
    """The layers' colours, and the budget's line."""
    return el(
        "div",
        [
            el("span", el("span", "", class_=f"swatch l-{layer}"), layer, data_layer=layer)
            for layer in LAYERS
        ],
        el("span", "dashed red line: the budget", class_="muted"),
        class_="legend",
    )


def _budget_path(rows: Sequence[Mapping[str, int]], scale: float) -> str:
    """A step line at each request's budget."""
    steps: list[str] = []
    for position, row in enumerate(rows):
        x = _GAP + position * (_BAR + _GAP)
        y = _HEIGHT - row["budget"] * scale
        steps.append(f"{'M' if position == 0 else 'L'}{x} {y:.1f} H{x + _BAR + _GAP}")
    return " ".join(steps)
